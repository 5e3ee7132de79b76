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
export RLX_PLUGIN_PATH=$plugins CK_DEFAULT_TIMEOUT=600 RLX_PROFILE_PATH=$root/src/profiles \
    RLX_SRCDIR=$root/src RLX_BUILDDIR=$build RLX_FIXTURES=$root/src/tests/fixtures \
    RLX_TEST_BACKEND=cuda
