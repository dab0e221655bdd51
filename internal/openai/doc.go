// Package openai is the OpenAI wire format as the router reads it, apart
// from validating requests (internal/route): the usage an engine reports
// in a whole answer or in a streamed answer's server-sent events, the
// content-part types of chat messages and what each is sized as, and what
// the JSON a chat template renders into the prompt (tool definitions, tool
// calls) weighs. Pure functions; no I/O.
package openai
