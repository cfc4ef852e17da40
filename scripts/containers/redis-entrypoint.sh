#!/bin/sh
# Stand-in redis:7 entrypoint (scripts/containers/standins.Containerfile): the upstream image's
# redis-server has protected mode off by default; Debian's has it on, which refuses connections
# from other containers. Pass --protected-mode no unless the command says otherwise.
set -e
if [ "$1" = redis-server ]; then
    case " $* " in
        *" --protected-mode "*) ;;
        *) shift; set -- redis-server "$@" --protected-mode no ;;
    esac
fi
exec "$@"
