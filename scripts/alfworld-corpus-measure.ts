// The served warm start's corpus on ALFWorld (docs/environments.md, "Warm start"): plays N corpus
// trials of the ε-imperfect expert (valid_train, task types 1-4) through the trial runner, prints
// the time and the corpus's counts, and writes the transcripts for scripts/count-corpus-tokens.py.
//
//   (cd python && $PY -m mage_envs.alfworld_server --port 8793) &
//   npx tsx scripts/alfworld-corpus-measure.ts http://127.0.0.1:8793 12 /tmp/alf-corpus.json
//   $PY scripts/count-corpus-tokens.py /tmp/alf-corpus.json models/smollm2-135m-instruct
import { writeFileSync } from "node:fs";
import { Rng } from "../src/core/rng.js";
import { openRemoteTask } from "../src/tasks/remote.js";
import { buildServedCorpus } from "../src/train/pretrain/served-corpus.js";

const [url, n, out] = [process.argv[2], Number(process.argv[3] ?? 12), process.argv[4]];
const def = await openRemoteTask({
  url,
  name: "alfworld",
  config: { split: "valid_train", taskTypes: "1-4", maxSteps: 30 },
  timeoutMs: 600_000,
});
const t0 = performance.now();
const corpus = await buildServedCorpus({ def, trials: n, rng: Rng.seeded(0).derive("measure") });
const minutes = (performance.now() - t0) / 60_000;
const s = corpus.stats;
console.log(
  `${s.trials} trials in ${(minutes * 60).toFixed(0)} s: ${(s.trials / minutes).toFixed(2)} trials/minute; ` +
    `${s.playResponses} play answers (${s.malformed} malformed), ${s.reflections} reflections, ` +
    `won ${s.won ?? 0} (${s.wonFirst ?? 0} at attempt 1)`,
);
if (out) writeFileSync(out, JSON.stringify({ trials: corpus.trials }));
def.client.destroy();
