#!/usr/bin/env bash
# Runs the node agent's Go tests (server/kubernetes), offline, with the build's flags
# (its cache then holds the dependencies compiled).
set -euo pipefail
# As a container with umask 077 runs it: the modes ferry_server needs are set, not asked
# of the umask.
umask 077
cd server/kubernetes
GOMODCACHE=/opt/ferry-go/mod GOCACHE=/opt/ferry-go/cache GOFLAGS=-mod=readonly GOPROXY=off \
  GOTOOLCHAIN=local CGO_ENABLED=0 go test -trimpath -count=1 -v . 2>&1
