#!/usr/bin/env bash
# The wheels the GPU machine's image lacks, into ./.whl (ignored by git): the project's shared
# list (lmdb, albumentations and their needs), plus Kornia, a peer in gpu_augment.py, timm,
# the peer in timm_loader.py (its hub and safetensors imports are optional), and NVIDIA
# nvImageCodec with nvJPEG (about 29 MB), GPUDecoder's hardware-decoder backend.
# On the GPU machine, start each command with:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=$PWD/src:/tmp/site
set -euo pipefail
cd "$(dirname "$0")/.."
bash ../shared/gpu/fetch-wheels.sh
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl kornia==0.9.0 kornia_rs==0.2.0 timm==1.0.31 \
  nvidia-nvimgcodec-cu13==0.9.0.20 nvidia-nvjpeg==13.3.2.43
ls .whl
