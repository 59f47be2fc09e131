// Package openai is the wire format that the gateway, the simulator and the
// load generator share: request scanning and types, server-sent event
// framing, OpenAI-style error bodies, the backends' own timing reports and
// the infergate_timing object the gateway hands to clients. It knows
// nothing of HTTP libraries.
package openai
