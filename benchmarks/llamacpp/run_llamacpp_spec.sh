#!/usr/bin/env bash
# Run llama.cpp's own llama-speculative-simple (draft-simple) on a target+draft GGUF pair.
#
#   run_llamacpp_spec.sh [-t TARGET.gguf] [-d DRAFT.gguf] (-f PROMPT_FILE | -i "id,id,...")
#                        [-k DRAFT_LEN] [-T TEMP] [-n N_TOKENS] [-s SEED] [-o OUTDIR] [-j THREADS] [-R]
#
# -R: --no-repack (no AMX/CPU repacked weights; REQUIRED for Q4_1 files on this AMX CPU, else segfault).
# Defaults: the converted demo pair (f16), draft length 4, temp 0, 128 tokens, 2 threads.
# -i: token ids are turned into text with the HF tokenizer (the binary only takes text and tokenizes
#     it itself with the GGUF tokenizer); the script checks that llama.cpp re-tokenizes it to the same ids.
# Tokenization: -f FILE has one trailing newline stripped and escapes processed by default; handled here.
# Writes OUTDIR/{stdout.txt,stderr.txt,generated.txt,result.json}; prints result.json.
# result.json: decoded tokens, seconds, tokens/s (llama.cpp's own "decoded N tokens in S seconds"),
# prompt tokens, n_drafted, n_accept, accept rate, the generated text and its token ids (HF tokenizer
# re-tokenization of the text; llama-speculative-simple does not print ids).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PY="${PYTHON:-/work/main/.venv/bin/python}"
TARGET="$HERE/gguf/demo_target_f16.gguf"; DRAFT="$HERE/gguf/demo_draft_f16.gguf"
PROMPT_FILE=""; IDS=""; K=4; TEMP=0; N=128; SEED=1; OUT="$(mktemp -d)"; THREADS=2; EXTRA=()
TOKJSON="${TOKJSON:-src/exactspec/pairs/demo_pair/target/tokenizer.json}"
while getopts "t:d:f:i:k:T:n:s:o:j:R" o; do case $o in
  t) TARGET=$OPTARG;; d) DRAFT=$OPTARG;; f) PROMPT_FILE=$OPTARG;; i) IDS=$OPTARG;; k) K=$OPTARG;;
  T) TEMP=$OPTARG;; n) N=$OPTARG;; s) SEED=$OPTARG;; o) OUT=$OPTARG;; j) THREADS=$OPTARG;; R) EXTRA+=(--no-repack);;
  *) sed -n 2,14p "$0"; exit 2;; esac; done
mkdir -p "$OUT"
if [[ -n "$IDS" ]]; then
  "$PY" -c "import sys; from tokenizers import Tokenizer; t=Tokenizer.from_file(sys.argv[1]); \
open(sys.argv[3],'w').write(t.decode([int(x) for x in sys.argv[2].split(',')], skip_special_tokens=False))" \
    "$TOKJSON" "$IDS" "$OUT/prompt.txt"
  PROMPT_FILE="$OUT/prompt.txt"
fi
[[ -n "$PROMPT_FILE" ]] || { echo "need -f PROMPT_FILE or -i IDS" >&2; exit 2; }
cp "$PROMPT_FILE" "$OUT/prompt.txt" 2>/dev/null || true
# llama.cpp's -f drops ONE trailing '\n' of the file: give it the prompt plus one newline.
# (and --no-escape: by default common_params un-escapes \n, \", \\ ... inside the prompt text)
{ cat "$OUT/prompt.txt"; printf '\n'; } > "$OUT/prompt_arg.txt"
SAMPLING=(--temp "$TEMP"); [[ "$TEMP" == "0" ]] && SAMPLING+=(--top-k 1)
set +e
"$HERE/bin/llama-speculative-simple" -m "$TARGET" -md "$DRAFT" -f "$OUT/prompt_arg.txt" \
  --spec-type draft-simple --spec-draft-n-max "$K" -n "$N" "${SAMPLING[@]}" --seed "$SEED" \
  -t "$THREADS" -tb "$THREADS" -td "$THREADS" -tbd "$THREADS" -c 2048 --log-colors off --no-escape ${EXTRA[@]+"${EXTRA[@]}"} \
  > "$OUT/stdout.txt" 2> "$OUT/stderr.txt"
RC=$?
set -e
[[ $RC -eq 0 ]] || { tail -20 "$OUT/stderr.txt" >&2; echo "llama-speculative-simple rc=$RC" >&2; exit $RC; }
"$PY" - "$OUT" "$TOKJSON" "$IDS" <<'EOF'
import json, re, sys
from tokenizers import Tokenizer
out, tokjson, ids_arg = sys.argv[1], sys.argv[2], sys.argv[3]
tok = Tokenizer.from_file(tokjson)
stdout = open(f"{out}/stdout.txt", encoding="utf-8", errors="replace").read()
err = open(f"{out}/stderr.txt", encoding="utf-8", errors="replace").read()
prompt = open(f"{out}/prompt.txt", encoding="utf-8").read()
body = stdout[2:] if stdout.startswith("\n\n") else stdout          # "\n\n" + prompt + generated + "\n\n"
body = body[:-4] if body.endswith("\n\n\n\n") else body   # it prints "\n\n" twice after the text
gen = body[len(prompt):] if body.startswith(prompt) else None
r = {}
m = re.search(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", err)
if m: r["prompt_tokens_llamacpp"] = int(m.group(1)); r["prompt_seconds"] = float(m.group(2))
m = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", err)
if m: r.update(decoded_tokens=int(m.group(1)), decode_seconds=float(m.group(2)), tokens_per_s=float(m.group(3)))
for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
    m = re.search(rf"{key}\s+=\s+(\d+)", err)
    if m: r[key] = int(m.group(1))
m = re.search(r"accept\s+=\s+([\d.]+)%", err)
if m: r["accept_rate"] = float(m.group(1)) / 100
m = re.search(r"#mean acc len = ([\d.]+), #acc rate/pos = \(([^)]*)\)", err)
if m: r["mean_acc_len"] = float(m.group(1)); r["acc_rate_per_pos"] = [float(x) for x in m.group(2).split(",")]
r["prompt_tokens_hf"] = len(tok.encode(prompt).ids)
if ids_arg:
    r["prompt_ids_roundtrip_ok"] = tok.encode(prompt).ids == [int(x) for x in ids_arg.split(",")]
r["prompt_echo_matches"] = gen is not None
r["prompt_tokenization_equal_count"] = r.get("prompt_tokens_llamacpp") == r["prompt_tokens_hf"]
r["generated_text"] = gen if gen is not None else body
r["generated_ids_retokenized"] = tok.encode(r["generated_text"]).ids
open(f"{out}/generated.txt", "w").write(r["generated_text"])
json.dump(r, open(f"{out}/result.json", "w"), indent=1)
print(json.dumps({k: v for k, v in r.items() if k not in ("generated_text", "generated_ids_retokenized")}))
print("generated (first 200 chars):", repr(r["generated_text"][:200]))
print("result:", f"{out}/result.json")
EOF
