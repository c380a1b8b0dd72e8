# tree="auto" against the chains, after the review fixes (chain priced by what whole chain runs achieved)
set -u
cd /work/main
B="PYTHONPATH=src .venv/bin/python -m exactspec bench --max-new-tokens 64 --repeats 3 --gammas 2,3,4 --systems token,tree --tree auto"
O=docs/bench/auto/r7/trees
eval "$B --num-prompts 6 --out $O/heldout_greedy" > /dev/null 2>&1
eval "$B --num-prompts 6 --temperature 1 --out $O/heldout_t1" > /dev/null 2>&1
eval "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $O/unseen_greedy" > /dev/null 2>&1
eval "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --out $O/unseen_t1" > /dev/null 2>&1
echo ALLDONE > $O/done
