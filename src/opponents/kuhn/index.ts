import type { OpponentKind } from "../registry.js";

/** Kuhn poker opponent families (filled in by the Kuhn opponents work). */
export const kuhnOpponentKinds: OpponentKind<any, any>[] = [];
