# Round r28 (issue 49): the stdlib cells on transformers after gamma="auto" priced each draft length by the loop's
# own steps at that fixed gamma (exactspec.engine.loopcosts), on a set written for it (unseen_code17.json).
# About 8 minutes a cell.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r28}
for T in 1 0; do
  ../.venv/bin/python bench_auto_cells.py --pair stdlib --backend transformers --temperature $T --prompts prompts/unseen_code17.json --num-prompts 8 --repeats 3 --out $O/stdlib_transformers_t$T.json > $O/stdlib_transformers_t$T.out 2>&1
done
date > $O/done.txt
