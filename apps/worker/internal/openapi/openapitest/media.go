package openapitest

import "github.com/getkin/kin-openapi/openapi3filter"

// A recording's video answers video/mp4: its body is checked as a string
// of bytes (the document's {type: string, contentEncoding: binary}).
func init() { openapi3filter.RegisterBodyDecoder("video/mp4", openapi3filter.FileBodyDecoder) }
