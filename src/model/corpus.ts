// Text the generated tokenizers learn their merges from: a little dialogue and
// knowledge-grounded prose, the register ctxprobe is used on.
export const TOKENIZER_CORPUS = `
Once upon a time, there was a little girl named Lily. She loved to play outside in the park.
User: Can you tell me about the Eiffel Tower? Bot: The Eiffel Tower is a wrought-iron lattice tower in Paris.
Knowledge: The tower was built for the 1889 World's Fair and is 330 metres tall.
User: Who designed it? Bot: It was designed by the engineering company of Gustave Eiffel.
The history of the conversation shows what the user asked and what the bot answered before.
Instruction: Given the dialogue history and the knowledge, choose the best response.
The model reads the instruction, the history, the knowledge and then the response.
I think that is not right; please check the knowledge again and answer the question.
She said, "Thank you very much for the help!" and they went home together at night.
Numbers like 2024, 3.14 and 42 appear in text, as do names such as Anna, Tom and Maria.
The weather today is sunny and warm, so we will walk to the river and have a picnic there.
`;
