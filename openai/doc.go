// Package openai is the wire format that the gateway, the simulator and the
// load generator share: request scanning and types, server-sent event
// framing, and OpenAI-style error bodies. It knows nothing of HTTP libraries.
package openai
