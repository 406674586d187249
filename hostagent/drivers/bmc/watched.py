"""Files the Redfish emulator reads on every request: parsed again only
when they change. Kept free of other imports: the emulator process loads
it."""

import os


def version(path):
    """What changes whenever the file at ``path`` is written or replaced
    (the hostagent replaces it: a new inode); None when there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)
