import type { OpponentKind } from "../registry.js";

/** TicTacToe opponent families (filled in by the TicTacToe opponents work). */
export const tictactoeOpponentKinds: OpponentKind<any, any>[] = [];
