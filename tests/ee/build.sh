#!/usr/bin/env bash
# Build the execution environment image for real (make test-ee): execution-environment.yml as
# published, with only its base swapped for one this machine can make. There is no image
# registry here, so no ubi9: the base is Debian trixie from tests/ee/build-trixie-base.sh, and
# the variant definition (written next to the context) changes just what a Debian base needs:
#   images.base_image.name               the local trixie image
#   options.package_manager_path         /usr/bin/apt-get (ansible-builder's steps call
#                                        `$PKGMGR install -y ...` and `$PKGMGR clean all`)
#   dependencies.python_interpreter      python3-pip python3-venv, and options.skip_pip_install
#                                        (Debian turns ensurepip off for its system python)
#   additional_build_steps.prepend_base  apt-get update; no recommended packages; non-interactive
# The requirements, bindep.txt, the azcopy download with its checksum and the collection
# install are the published ones, unchanged.
#
# usage: tests/ee/build.sh [WORKDIR]     (default .cache/ee) -> prints the image tag last
#   EE_TAG=name:tag    the image's tag (default ee-amlhpc:<galaxy version>-trixie)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
py=${EE_PYTHON:-$root/.venv/bin/python}
work=${1:-$root/.cache/ee}

base=$(tests/ee/build-trixie-base.sh | tail -n 1)
version=$("$py" -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')
tag=${EE_TAG:-ee-amlhpc:${version}-trixie}

rm -rf "$work"
mkdir -p "$work/context-src"
cp execution-environment.yml bindep.txt requirements.txt "$work/"
"$root/.venv/bin/ansible-galaxy" collection build --output-path "$work/context-src" "$root" >&2

"$py" - "$work/execution-environment.yml" "$work/ee-trixie.yml" "$base" <<'PY'
import sys

import yaml

src, dst, base = sys.argv[1:]
ee = yaml.safe_load(open(src))
ee["images"]["base_image"]["name"] = base
ee.setdefault("options", {})["package_manager_path"] = "/usr/bin/apt-get"
# Debian turns ensurepip off for its python3: pip and venv come as packages instead.
ee["dependencies"]["python_interpreter"] = {"package_system": "python3-pip python3-venv", "python_path": "/usr/bin/python3"}
ee["options"]["skip_pip_install"] = True
steps = ee.setdefault("additional_build_steps", {})
steps["prepend_base"] = [
    "ENV DEBIAN_FRONTEND=noninteractive",
    """RUN echo 'APT::Install-Recommends "false";' > /etc/apt/apt.conf.d/90ee-no-recommends && apt-get update -qq""",
] + list(steps.get("prepend_base", []))
with open(dst, "w") as f:
    f.write("# Written by tests/ee/build.sh from execution-environment.yml: a Debian trixie base.\n")
    yaml.safe_dump(ee, f, sort_keys=False, width=200)
PY

echo "building $tag on $base (ansible-builder, docker) ..." >&2
previous=$(docker image inspect -f '{{.Id}}' "$tag" 2>/dev/null || true)
start=$(date +%s)
(cd "$work" && "$py" -m ansible_builder build -f ee-trixie.yml --context context \
   --container-runtime docker --extra-build-cli-args=--force-rm --tag "$tag" -v 3) >"$work/build.log" 2>&1 || {
  tail -n 40 "$work/build.log" >&2
  echo "ansible-builder build failed: the whole log is $work/build.log" >&2
  exit 1
}
echo "built $tag in $(( $(date +%s) - start )) s (log: $work/build.log)" >&2
# The image this tag named before (a rebuild after a change): gone, unless something uses it.
if [ -n "$previous" ] && [ "$previous" != "$(docker image inspect -f '{{.Id}}' "$tag")" ]; then
  docker image rm "$previous" >/dev/null 2>&1 || true
fi
echo "$tag"
