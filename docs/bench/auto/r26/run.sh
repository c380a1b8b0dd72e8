cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r26}
for pair in stdlib smollm2; do
  P=prompts/unseen_code15.json; [ $pair = smollm2 ] && P=prompts/unseen_chat5.json
  for be in transformers llamacpp; do
    for T in 0 1; do
      ../.venv/bin/python bench_auto_cells.py --pair $pair --backend $be --temperature $T --prompts $P --num-prompts 8 --repeats 3 --out $O/${pair}_${be}_t$T.json > $O/${pair}_${be}_t$T.out 2>&1
    done
  done
done
date > $O/done.txt
