#!/usr/bin/env bash
# The peers benchmarks/peers.py compares fastload with, into the project's .venv: NVIDIA
# DALI (its CPU operators need no GPU), torchdata, and FFCV (built from source against
# Debian's libjpeg-turbo and OpenCV). None of them is a fastload dependency; a peer that
# fails to install is reported here and, by peers.py, in its table.
#
# Usage: bash benchmarks/install_peers.sh   (from the project root, after `make test` or
# `make demo` made .venv; FFCV's build packages need root: apt-get)
set -uo pipefail
cd "$(dirname "$0")/.."
PIP=".venv/bin/python -m pip install -q -c constraints.txt"

$PIP nvidia-dali-cuda130 || echo "DALI did not install: peers.py will report it" >&2
$PIP torchdata || echo "torchdata did not install: peers.py will report it" >&2

# FFCV 1.0.2 asks for opencv-python, which would shadow opencv-python-headless: its other
# dependencies are installed by name, and FFCV itself without them.
if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get install -y -q libturbojpeg0-dev libopencv-dev pkg-config >/dev/null \
        || echo "apt-get could not install FFCV's build packages" >&2
fi
$PIP numba terminaltables pytorch_pfn_extras fastprogress psutil assertpy imgcat fastargs \
    && $PIP --no-deps --no-build-isolation ffcv==1.0.2 \
    || echo "FFCV did not install: peers.py will report it" >&2

$PIP webdataset litdata 'ray[data]' || echo "a streaming peer did not install: object_storage.py will report it" >&2
# mosaicml-streaming 0.13 pins numpy<2.2 and transformers<5: without its pins, with the
# modules it imports
$PIP --no-deps mosaicml-streaming \
    && $PIP brotli 'python-snappy<1' 'zstd<2' 'xxhash<4' 'catalogue<3' 'transformers>=5' \
    || echo "MosaicML Streaming did not install: object_storage.py will report it" >&2
