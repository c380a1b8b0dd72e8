#!/bin/bash
set -e
SRC=/work/scratch/src/llama_cpp_python-0.3.36/vendor/llama.cpp
B=/work/scratch/build
start=$(date +%s)
cmake -S $SRC -B $B -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
  -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_COMMON=ON > /work/scratch/cmake_config.log 2>&1
t1=$(date +%s); echo "configure $((t1-start)) s"
cmake --build $B -j2 --target llama-speculative-simple llama-speculative llama-simple
t2=$(date +%s); echo "build $((t2-t1)) s"
mkdir -p /work/scratch/llamacpp/bin
cp $B/bin/llama-speculative-simple $B/bin/llama-speculative $B/bin/llama-simple /work/scratch/llamacpp/bin/
echo "total $((t2-start)) s"
