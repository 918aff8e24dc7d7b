#!/usr/bin/env bash
# Build what a GPU machine without a registry needs to serve SGLang 0.5.17: one xz tarball of a
# `pip install --target` tree, small enough to travel with the checkout (64 MiB a call on the lent
# machine). 0.5.17 is served because it is the newest release pinning the torch the lent machine
# already has (2.11.0); 0.5.23 pins torch 2.14.1, which cannot travel.
#
# What is left out, and why it may be (each found by starting the server on the lent H200):
#   - the GPU stacks the machine has (torch, triton, numpy, ...: its own image) and the ones a
#     triton-attention, pytorch-sampling server never imports (flashinfer, flash-attn-4, tilelang,
#     deep-gemm, cutlass-dsl, ...);
#   - from sglang-kernel 0.4.5 (383 MB): flash_ops (FlashAttention, 1.1 GB unpacked), the sm100
#     build, infllm and flashmla ops; `import sgl_kernel` on an H200 needs only sm90/common_ops;
#   - xgrammar's static library (libxgrammar.a), a build input, not a runtime one.
# Usage: bash tests/gpu/real_sglang/bundle.sh [outdir]   (default .cache/real-sglang, ignored by git)
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/.cache/real-sglang}
work=$out/work
mkdir -p "$out" "$work/deps" "$work/wh"
py=${PYTHON312:-}
for c in "$py" "$HOME"/.pyenv/versions/3.12*/bin/python3 python3.12; do
  [[ -n $c ]] && "$c" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && py=$c && break
done
[[ -n $py ]] || { echo "bundle: need a Python 3.12 here (the wheels are cp312)" >&2; exit 1; }

plat=()
for n in $(seq 17 39); do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
dl() {
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${plat[@]}" -d "$1" "${@:2}" 2>&1 | { grep -v "is ignored: it is neither" || true; }
  return "${PIPESTATUS[0]}"
}

dl "$work/wh" sglang==0.5.17 sglang-kernel==0.4.5
# The server's own imports that the machine's image lacks, pinned where 0.5.17 pins them;
# transformers and tokenizers because 0.5.17 pins older ones than the image's.
dl "$work/deps" \
  transformers==5.12.1 tokenizers==0.22.2 \
  compressed-tensors==0.20.1 loguru==0.7.3 distro==1.9.0 easydict==1.14 fastapi==0.165.0 \
  starlette==1.10.0 opentelemetry-api==1.45.2 interegular==0.3.3 msgspec==0.23.0 openai==2.6.1 \
  jiter==0.19.0 sniffio==1.3.1 openai-harmony==0.0.4 orjson==3.13.0 partial-json-parser==0.2.1.1.post7 \
  pybase64==1.5.1 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
  typing-inspection==0.4.5 python-multipart==0.0.34 pyzmq==27.3.0 setproctitle==1.3.8 \
  uvicorn==0.55.0 watchfiles==1.3.0 xgrammar==0.2.1 zstandard==0.25.0 dill==0.4.1 \
  flashinfer-python==0.6.15.post1 apache-tvm-ffi==0.1.11 cuda-tile==1.7.0 nccl4py==0.6.0 \
  jsonschema==4.26.0 referencing==0.37.0 rpds-py==2026.9.1 jsonschema-specifications==2025.9.1 \
  datasets==5.2.0 multiprocess==0.70.19 sgl-deep-gemm==0.1.5.post1 gguf==0.19.0 soundfile==0.13.1 cffi==2.1.1 pycparser==2.23 \
  ipython==9.18.1 traitlets==5.16.1 stack-data==0.6.3 pure-eval==0.2.4 asttokens==3.0.2 \
  executing==2.3.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 pexpect==4.9.0 ptyprocess==0.7.0 \
  matplotlib-inline==0.2.2 jedi==0.20.1 parso==0.8.7 ipython-pygments-lexers==1.1.1
# Not carried although 0.5.17 requires them: the grammar backends other than xgrammar
# (outlines, llguidance: the server runs with --grammar-backend none), the Anthropic front-end
# backend of sglang.lang, blobfile (Azure connector), the diffusion server (multimodal_gen).

site=$work/site
rm -rf "$site" && mkdir -p "$site"
"$py" -m pip install -q --no-index --no-deps --no-compile --target "$site" \
  "$work"/deps/*.whl "$work"/wh/sglang-0.5.17-*.whl
kern=$work/kernel && rm -rf "$kern" && mkdir -p "$kern"
(cd "$kern" && python3 -m zipfile -e "$work"/wh/sglang_kernel-0.4.5-*.whl .)
rm -f "$kern"/sgl_kernel/flash_ops.abi3.so "$kern"/sgl_kernel/infllm_ops*.so \
      "$kern"/sgl_kernel/flashmla_ops.abi3.so "$kern"/sgl_kernel/sm100/common_ops.abi3.so
cp -r "$kern"/sgl_kernel "$kern"/triton_kernels "$kern"/sglang_kernel-0.4.5.dist-info "$site"/
rm -rf "$site"/xgrammar/lib/libxgrammar.a "$site"/sglang/multimodal_gen "$site"/jedi/third_party
# zstandard ships two backends; its default import policy loads the C one (backend_c), the CFFI
# one (12 MB) only if that fails: left out so both tarballs and the checkout fit one call.
rm -f "$site"/zstandard/_cffi.cpython-*.so
# FlashInfer's data/ is what its JIT compiles from. 0.5.17's RMSNorm is FlashInfer's, JIT-built
# with the machine's nvcc at the first start (seen on the H200): keep its own sources and headers,
# leave out the CUTLASS and CCCL copies (62 MB) that only the GEMM/MoE/attention kernels include.
rm -rf "$site"/flashinfer/data/cutlass "$site"/flashinfer/data/cccl
find "$site" -name __pycache__ -prune -exec rm -rf {} +
# Two tarballs, because together they exceed what one call carries (64 MiB with the checkout):
# site.tar.xz (Python side) on the first call, kernels.tar.xz (sgl_kernel, DeepGEMM - imported by
# the speculative worker's graph capture - and FlashInfer's JIT sources) on the next one, while the
# machine is still warm; device.sh setup unpacks whichever has not been unpacked yet.
ksite=$work/kernels-site
rm -rf "$ksite" && mkdir -p "$ksite/flashinfer"
mv "$site"/sgl_kernel "$site"/triton_kernels "$site"/sglang_kernel-0.4.5.dist-info "$site"/deep_gemm \
   "$site"/sgl_deep_gemm-*.dist-info "$ksite"/
mv "$site"/flashinfer/data "$ksite"/flashinfer/
for name in site kernels; do
  dir=$site; [[ $name == kernels ]] && dir=$ksite
  # -9e, not the default -6: 42.9 + 15.8 MB instead of 46.3 + 16.0, so both tarballs, the
  # tokenizer and the checkout (5.4 MB) travel in one call (3 minutes more on 2 cores)
  tar -C "$dir" -cf - . | xz -T2 -9e > "$out/$name.tar.xz.part"
  mv "$out/$name.tar.xz.part" "$out/$name.tar.xz"
done
# The unpacked trees were only the tarballs' input: drop them (the wheels stay for the next build).
rm -rf "$site" "$ksite" "$kern"
ls -l "$out"/*.tar.xz
echo "bundle: carry .cache/real-sglang/site.tar.xz in one call, .cache/real-sglang/kernels.tar.xz in the next"
