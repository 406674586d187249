#!/bin/bash
# plugin.sh - DevStack plugin of Tenks: the virtual bare metal of an Ironic
# job (see settings for the order of plugins in local.conf).

source "$(dirname "${BASH_SOURCE[0]}")/lib/tenks"

if is_service_enabled tenks; then
    if [[ "$1" == "stack" ]]; then
        case "$2" in
            install)
                echo_summary "Installing Tenks"
                install_tenks
                ;;
            post-config)
                echo_summary "Writing the Tenks spec of $TENKS_VM_COUNT node(s)"
                write_tenks_spec
                ;;
            test-config)
                # Every plugin's extra phase has run: Ironic is up, its
                # deploy images are known.
                echo_summary "Deploying Tenks cluster $TENKS_CLUSTER"
                deploy_tenks_cluster
                ;;
        esac
    fi

    if [[ "$1" == "unstack" ]]; then
        teardown_tenks_cluster
    fi

    if [[ "$1" == "clean" ]]; then
        teardown_tenks_cluster
        cleanup_tenks
    fi
fi
