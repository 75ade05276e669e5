"""Token counts of the calls scripts/alfworld-prompt-tokens.ts wrote, with a model's tokenizer and chat template.

    $PY scripts/count-chat-tokens.py CALLS.json MODEL_DIR

full style: tokens per call (prompt + answer) and per trial (32 calls); compact style: the longest call
of each trial, which holds the whole trial as one chat.
"""

import json
import statistics
import sys

from transformers import AutoTokenizer


def main() -> None:
    calls_path, model = sys.argv[1], sys.argv[2]
    tok = AutoTokenizer.from_pretrained(model)
    calls = json.load(open(calls_path))["calls"]

    def count(c: dict) -> int:
        ids = tok.apply_chat_template(c["messages"], tokenize=True, add_generation_prompt=True)
        if hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids) + len(tok(c["response"])["input_ids"])

    full = [count(c) for c in calls if c["style"] == "full"]
    print(f"full: {len(full)} calls, {statistics.mean(full):.0f} tokens per call (max {max(full)})")
    trials: dict[str, int] = {}
    for c in calls:
        if c["style"] == "compact":
            key = c["messages"][0]["content"] + c["messages"][1]["content"]
            trials[key] = max(trials.get(key, 0), count(c))
    per = list(trials.values())
    print(f"compact: whole-trial chat {statistics.mean(per):.0f} tokens on average (max {max(per)}) over {len(per)} trials")


if __name__ == "__main__":
    main()
