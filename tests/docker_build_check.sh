#!/bin/sh
# The image's build stage, without docker: copies what docker/Dockerfile's
# first stage COPYs (and nothing else) into an empty directory and runs its
# RUN make line there.  `docker-compose config` checks only the compose
# file's syntax; a Makefile rule needing a file the Dockerfile did not copy
# (as the validator's profile-guided build once did) broke `docker compose
# up --build` with every test green.  Usage: docker_build_check.sh [DIR]
# (DIR: the repository, default the current directory).
set -eu
repo=$(cd "${1:-.}" && pwd)
dockerfile="$repo/docker/Dockerfile"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Only the build stage: the lines before the second FROM.
stage=$(awk '/^FROM /{n++} n==1' "$dockerfile")
cmd=$(printf '%s\n' "$stage" | sed -n 's/^RUN \(make .*\)$/\1/p')
if [ -z "$cmd" ]; then
    echo "docker build check: no 'RUN make' line in the build stage of $dockerfile" >&2
    exit 1
fi
printf '%s\n' "$stage" | grep '^COPY ' | grep -v -- '--from' | while read -r _ src dst; do
    case "$dst" in
    */) mkdir -p "$tmp/$dst" ;;
    *) mkdir -p "$tmp/$(dirname "$dst")" ;;
    esac
    cp -R "$repo/$src" "$tmp/$dst"
done
if ! (cd "$tmp" && sh -c "$cmd") >"$tmp.log" 2>&1; then
    tail -20 "$tmp.log" >&2
    rm -f "$tmp.log"
    echo "docker build check: '$cmd' failed with only the files the Dockerfile copies" >&2
    exit 1
fi
rm -f "$tmp.log"
echo "docker build stage: '$cmd' builds from the files it copies"
