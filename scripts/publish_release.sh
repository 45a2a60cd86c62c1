#!/usr/bin/env bash
# Publish the sdist and wheel in DIST to the package index, only from a tag v<version> that names the version the
# files carry. The index token comes from the agent's secrets (buildkite-agent secret get), never from the repo.
# Usage: scripts/publish_release.sh DIST
set -euo pipefail
dist=${1:?usage: scripts/publish_release.sh DIST}
tag=${BUILDKITE_TAG:?publish runs only for a tagged build}
wheel=$(ls "$dist"/spec_decode_ci-*.whl)
version=$(basename "$wheel" | cut -d- -f2)
if [ "$tag" != "v$version" ]; then
  echo "publish_release: tag $tag does not name the version of $wheel (expected v$version)" >&2
  exit 1
fi
TWINE_USERNAME=__token__ TWINE_PASSWORD=$(buildkite-agent secret get SPEC_DECODE_CI_INDEX_TOKEN) \
  python -m twine upload --non-interactive "$dist"/*
