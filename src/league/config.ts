import { z } from "zod";

/**
 * `population.league`: the agent's own snapshots as opponents (docs/configs.md, "League").
 * A snapshot of the agent is taken after every `every` iterations (and of the starting model
 * with `atStart`), saved in the run directory, and `share` of each iteration's rollout groups
 * play snapshots picked by `sampling`; the rest play the scripted `population.opponents`.
 */
export const SNAPSHOT_SAMPLING = ["latest", "lagged", "uniform", "rating"] as const;
export type SnapshotSampling = (typeof SNAPSHOT_SAMPLING)[number];

export const LeagueSchema = z
  .object({
    /** A snapshot after every this many iterations. */
    every: z.number().int().positive(),
    /** A snapshot of the starting model too (iteration 0), so snapshots play from the first iteration. */
    atStart: z.boolean().default(true),
    /** Share of each iteration's rollout groups that play snapshots (the rest: the scripted opponents). */
    share: z.number().min(0).max(1).default(0.5),
    /**
     * How a snapshot group picks its snapshot: `latest` (pure self-play), `lagged` (one `lag.min`
     * to `lag.max` iterations old), `uniform` over the pool, `rating` (prioritised fictitious
     * self-play: weight (1 − P(agent beats it))^`priority` by the ratings).
     */
    sampling: z.enum(SNAPSHOT_SAMPLING).default("uniform"),
    /** `lagged`: the age window in iterations, both ends included. */
    lag: z
      .object({ min: z.number().int().min(0), max: z.number().int().min(0) })
      .strict()
      .default({ min: 1, max: 20 }),
    /** `rating`: the exponent of (1 − P(win)); 0 is uniform, larger favours the hardest snapshots more. */
    priority: z.number().min(0).default(1),
    /** Most snapshots in the pool (and loaded at once); the oldest leaves when a new one would exceed it. */
    maxSnapshots: z.number().int().positive().default(8),
  })
  .strict()
  .superRefine((l, ctx) => {
    if (l.lag.min > l.lag.max)
      ctx.addIssue({
        code: "custom",
        path: ["lag", "min"],
        message: `must be at most lag.max (${l.lag.max}), got ${l.lag.min}`,
      });
  });

export type LeagueConfig = z.infer<typeof LeagueSchema>;

/**
 * `population.ratings`: the Weng-Lin (openskill) model's knobs. Ratings are kept when
 * `population.rate` is true or a league is configured.
 */
export const RatingSchema = z
  .object({
    /** Skill spread per game outcome (openskill's beta; default 25/6). */
    beta: z
      .number()
      .positive()
      .default(25 / 6),
    /** Skill drift added before every game (openskill's tau), so the agent's rating can follow it as it learns. */
    tau: z
      .number()
      .min(0)
      .default(25 / 300),
  })
  .strict();

export type RatingConfig = z.infer<typeof RatingSchema>;
