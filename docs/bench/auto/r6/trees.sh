# tree="auto" against the chains, after the fallback to the gamma="auto" chain (run from the repo root)
set -u
B="PYTHONPATH=src .venv/bin/python -m exactspec bench --max-new-tokens 64 --repeats 3 --gammas 2,3,4 --systems token,tree --tree auto"
O=docs/bench/auto/r6
eval "$B --num-prompts 6 --out $O/trees_heldout_greedy" > /dev/null 2>&1
eval "$B --num-prompts 6 --temperature 1 --out $O/trees_heldout_t1" > /dev/null 2>&1
eval "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $O/trees_unseen_greedy" > /dev/null 2>&1
echo ALLDONE > $O/trees.done
