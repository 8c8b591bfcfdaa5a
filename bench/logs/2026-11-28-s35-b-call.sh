set -uo pipefail
out=${OUT:-/tmp/out}; mkdir -p $out
[ -d build-gpu ] || bash scripts/gpu_setup.sh -DCMAKE_BUILD_TYPE=Release > $out/setup.log 2>&1
if [ ! -x /tmp/a/build/linattn_cuda_stage_bench ]; then mkdir -p /tmp/a && tar -xzf .device/a.tar.gz -C /tmp/a && cmake -S /tmp/a -B /tmp/a/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINATTN_ENABLE_CUDA=ON -DCUTLASS_INCLUDE_DIR=/tmp/linattn-deps/include -DCMAKE_PREFIX_PATH=/tmp/linattn-deps/gtest-install >/dev/null 2>&1; cmake --build /tmp/a/build -j 8 --target linattn_cuda_stage_bench linattn-run > $out/build-a.log 2>&1 & fi
cmake --build build-gpu -j 16 --target linattn_cuda_stage_bench linattn-run linattn_cuda_tests > $out/build.log 2>&1 || { tail -30 $out/build.log; exit 1; }
wait; ls /tmp/a/build/linattn_cuda_stage_bench || exit 1
for c in "--family kda --T 900 --gate-in-kernel --backward-precision float32 --l2norm" "--family gla --dtype fp16 --backward-precision float32 --T 777 --HV 16"; do
 for B in ./build-gpu/linattn-run /tmp/a/build/linattn-run; do echo "$B $(timeout 60 $B $c --repeat 1 2>&1 | grep -E '^bits|rror' | head -2)"; done; done
for v in X A X A; do
  B=./build-gpu/linattn_cuda_stage_bench; [ $v = A ] && B=/tmp/a/build/linattn_cuda_stage_bench
  timeout 90 $B backward --family kda --gate softplus_fla --only float32 --stages > $out/f32-$v.log 2>&1
  timeout 90 $B backward --family gla --gate logsigmoid --only float32 --stages > $out/glaf32-$v.log 2>&1
  echo "$v kda-f32: $(grep -h 'profile\] auto' $out/f32-$v.log | tr '\n' ' ')"
  echo "$v gla-f32: $(grep -h 'profile\] auto' $out/glaf32-$v.log | tr '\n' ' ')"
done
timeout 100 ./build-gpu/linattn_cuda_tests --gtest_filter='*Small*:*Float32*' 2>&1 | tail -3
