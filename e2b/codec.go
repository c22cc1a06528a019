package e2b

import (
	"encoding/json"
	"fmt"
)

// jsonCodec is connect-go's codec for the Connect protocol with JSON
// ("application/json", "application/connect+json"), over the plain
// structs of messages.go.
type jsonCodec struct{}

func (jsonCodec) Name() string { return "json" }

func (jsonCodec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes a request; an empty body is the empty message.
func (jsonCodec) Unmarshal(b []byte, v any) error {
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	return nil
}
