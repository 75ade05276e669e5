"""Tokens per corpus trial (the whole trial as one chat) in a model's chat template.

    $PY scripts/count-corpus-tokens.py CORPUS.json MODEL_DIR
"""

import json
import statistics
import sys

from transformers import AutoTokenizer


def main() -> None:
    path, model = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(model)
    trials = json.load(open(path))["trials"]
    counts, remarks = [], []
    for t in trials:
        ids = tok.apply_chat_template(t["messages"], tokenize=True)
        counts.append(len(ids["input_ids"] if hasattr(ids, "keys") else ids))
        for m, k in zip([m for m in t["messages"] if m["role"] == "assistant"], t["kinds"]):
            if k == "reflection":
                remarks.append(len(tok(m["content"])["input_ids"]))
    print(f"{len(counts)} trials: {statistics.mean(counts):.0f} tokens per trial on average (max {max(counts)}, min {min(counts)})")
    if remarks:
        print(f"{len(remarks)} reflections: {statistics.mean(remarks):.1f} tokens on average (max {max(remarks)})")


if __name__ == "__main__":
    main()
