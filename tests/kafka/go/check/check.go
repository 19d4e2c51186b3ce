// Package check holds what the Go client programs (franz, sarama) share: the records they
// report as one JSON line on stdout, and how they fail.
package check

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Timeout bounds each program's produce and each consumer run.
const Timeout = 60 * time.Second

// Record is one consumed record.
type Record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

// Sent is where one produced record landed.
type Sent struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Fail prints the problem on stderr and exits 1.
func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// Print writes v as the program's one JSON line.
func Print(v any) {
	line, err := json.Marshal(v)
	if err != nil {
		Fail("json: %v", err)
	}
	fmt.Println(string(line))
}
