/** The generation benchmarks' prompts: "Write a long story about …", cycling over eight topics. */
const TOPICS = [
  "the sea",
  "a mountain village",
  "winter",
  "a lost key",
  "the first computer",
  "a market",
  "rain",
  "a lighthouse",
];

/** Request i's chat: a story on topic i (mod 8). */
export function storyMessages(i: number): { role: "user"; content: string }[] {
  return [{ role: "user", content: `Write a long story about ${TOPICS[i % TOPICS.length]}.` }];
}
