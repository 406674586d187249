#!/bin/bash
# Stand-ins for the few functions of DevStack's functions-common that the
# Tenks plugin (devstack/settings, plugin.sh, lib/tenks) calls. The real
# file cannot be sourced without a whole DevStack: it reads stackrc, the
# distribution's package lists and DevStack's own tree. Each stand-in does
# what the real one does for the plugin's calls:
#
#   define_plugin NAME          records nothing (a no-op in DevStack too)
#   enable_service NAME...      adds to ENABLED_SERVICES
#   is_service_enabled NAME...  whether any is in ENABLED_SERVICES (DevStack
#                               also knows service groups: none used here)
#   trueorfalse DEFAULT VAR     VAR's value as True or False, else DEFAULT
#   echo_summary TEXT           prints it (DevStack: to its summary log)
#   die LINE TEXT               prints it on stderr, exits 1 (DevStack also
#                               dumps its call stack)
# Everything else the plugin runs is real: python3, the tenks command, the
# test's OpenStack services through clouds.yaml.

ENABLED_SERVICES=${ENABLED_SERVICES:-}

function define_plugin {
    :
}

function enable_service {
    local service
    for service in "$@"; do
        if [[ ,$ENABLED_SERVICES, != *,$service,* ]]; then
            ENABLED_SERVICES+=${ENABLED_SERVICES:+,}$service
        fi
    done
}

function is_service_enabled {
    local service
    for service in "$@"; do
        if [[ ,$ENABLED_SERVICES, == *,$service,* ]]; then
            return 0
        fi
    done
    return 1
}

function trueorfalse {
    local default=$1
    local value=${!2:-}
    case "$value" in
        1|[yY]es|YES|[tT]rue|TRUE) echo True ;;
        0|[nN]o|NO|[fF]alse|FALSE) echo False ;;
        *) echo "$default" ;;
    esac
}

function echo_summary {
    echo "$@"
}

function die {
    local line=$1
    shift
    echo "[ERROR] line $line: $*" >&2
    exit 1
}
