# Sourced by tools/gpu-check.sh run and tools/gpu-ab.sh on the GPU machine, with $root,
# $build and $dir set: unpacks the pack in $dir (the tree at the same absolute paths, the
# runtime .debs under /tmp/deps; not again with GPU_ENV_UNPACKED=1), then enters $build with what make check's
# AM_TESTS_ENVIRONMENT sets (tests/tests.am) exported, for the CUDA backend.
if [ "${GPU_ENV_UNPACKED:-}" != 1 ]; then
    tar -C / -xJf "$dir/rlx-gpu.tar.xz" || exit 1
    mkdir -p /tmp/deps && for f in "$dir"/debs/*.deb; do dpkg -x "$f" /tmp/deps; done
fi
lib=/tmp/deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$build/.libs:$lib:$lib/openblas-pthread:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
cd "$build" || exit 1
plugins=$(sed -n "s/^RLX_BUILD_PLUGIN_PATH = //p" Makefile | sed "s|\$(abs_top_builddir)|$build|g")
# tensor-parallel runs: NVLink multicast off (these machines), NCCL as PyTorch ships it
# (pip nvidia-nccl-*) unless RLX_NCCL_LIBRARY names one; the LLaMA-8B-width model
# gpu-check.sh's tp-speed row makes (gpu-ab.sh's tpab rows reuse it)
tp_model=/tmp/rlx-llama8b
tp_env() {
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    [ -n "${RLX_NCCL_LIBRARY:-}" ] || RLX_NCCL_LIBRARY=$(python3 -c 'import glob, os, sys
for p in sys.path:
    for f in sorted(glob.glob(os.path.join(p, "nvidia", "**", "libnccl.so*"), recursive=True)):
        print(f); sys.exit()' 2>/dev/null)
    export RLX_NCCL_LIBRARY
}
export RLX_PLUGIN_PATH=$plugins CK_DEFAULT_TIMEOUT=600 RLX_PROFILE_PATH=$root/src/profiles \
    RLX_SRCDIR=$root/src RLX_BUILDDIR=$build RLX_FIXTURES=$root/src/tests/fixtures \
    RLX_TEST_BACKEND=cuda
