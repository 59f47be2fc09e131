// The official Node SDK (openai-node) against the gateway: node
// responses.cjs BASE_URL MODE prints one JSON object. Modes: stream (the
// event types, the streamed text and thinking, the final response),
// whole (the response), abort (streams three events, aborts, prints when).
const { OpenAI } = require("openai");

async function main() {
  const [baseURL, mode] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: "sk-test", maxRetries: 0 });
  const params = { model: "m", instructions: "Be brief.", input: "Why cache?", max_output_tokens: 16 };
  if (mode === "stream") {
    const stream = await client.responses.create({ ...params, stream: true, ignore_eos: true });
    const types = [];
    let text = "", thinking = "", final = null;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === "response.output_text.delta") text += ev.delta;
      if (ev.type === "response.reasoning_text.delta") thinking += ev.delta;
      if (ev.type === "response.completed" || ev.type === "response.incomplete") final = ev.response;
    }
    const finalText = final ? final.output.filter((it) => it.type === "message").flatMap((it) => it.content).map((p) => p.text || "").join("") : null;
    console.log(JSON.stringify({ types, text, thinking, final_text: finalText, usage: final && final.usage }));
  } else if (mode === "whole") {
    const r = await client.responses.create(params);
    console.log(JSON.stringify({ object: r.object, text: r.output_text, usage: r.usage }));
  } else if (mode === "abort") {
    const stream = await client.responses.create({ model: "m", input: "go on", stream: true });
    let n = 0;
    for await (const ev of stream) {
      if (++n === 3) {
        const at = Date.now();
        stream.controller.abort();
        console.log(JSON.stringify({ aborted_at_ms: at, events: n }));
        break;
      }
    }
  }
}

main().catch((e) => {
  console.log(JSON.stringify({ error: String(e), status: e.status }));
  process.exit(1);
});
