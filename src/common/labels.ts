// How the API labels chat messages (part of the protocol: clients name query segments
// by these labels before the server answers).

export interface ChatMessage {
  role: string;
  content: string;
  /** Labelled chunks inside the message (mtRAG: retrieved passages in one user turn);
   * their texts make up `content`. */
  chunks?: { label: string; text: string }[];
}

/** Labels of chat messages: `system`, then `user#1`, `assistant#1`, `user#2`, … (a turn
 * starts at each user message). */
export function messageLabels(messages: readonly { role: string }[]): string[] {
  let turn = 0;
  return messages.map((m) => {
    if (m.role === 'user') turn++;
    return m.role === 'system' && turn === 0 ? 'system' : `${m.role}#${Math.max(turn, 1)}`;
  });
}
