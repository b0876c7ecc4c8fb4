package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/opstatus/opstatus/internal/testenv"
)

// hostLogging is how many records the Functions host writes to Application
// Insights for one invocation of each function besides the handler's own
// lines, under host.json's logging.logLevel: the request (category
// Host.Results), "Executing" and "Executed" (Function.<name>), and for a
// queue or Cosmos DB trigger "Trigger Details" (Function.<name>, assumed for
// the Cosmos DB trigger as the queue's).
type hostLogging struct {
	Timer, Queue int
}

// logLevels are the levels of Microsoft.Extensions.Logging, lowest first.
var logLevels = []string{"trace", "debug", "information", "warning", "error", "critical", "none"}

// parseHostLogging reads host.json's logging.logLevel as the host filters
// categories: the longest key that is a prefix of the category wins, then
// "default", then Information.
func parseHostLogging(hostJSON []byte) (hostLogging, error) {
	var h struct {
		Logging struct {
			LogLevel map[string]string `json:"logLevel"`
		} `json:"logging"`
	}
	if err := json.Unmarshal(hostJSON, &h); err != nil {
		return hostLogging{}, fmt.Errorf("host.json: %w", err)
	}
	rank := map[string]int{}
	for i, l := range logLevels {
		rank[l] = i
	}
	levels := map[string]int{}
	for k, v := range h.Logging.LogLevel {
		r, ok := rank[strings.ToLower(v)]
		if !ok {
			return hostLogging{}, fmt.Errorf("host.json: logging.logLevel %q: unknown level %q", k, v)
		}
		levels[strings.ToLower(k)] = r
	}
	info := rank["information"]
	logs := func(category string) bool {
		category = strings.ToLower(category)
		best, level := -1, info
		for k, r := range levels {
			if k != "default" && strings.HasPrefix(category, k) && len(k) > best {
				best, level = len(k), r
			}
		}
		if best < 0 {
			if r, ok := levels["default"]; ok {
				level = r
			}
		}
		return level <= info
	}
	count := func(function string, trigger bool) int {
		n := 0
		if logs("Host.Results") {
			n++
		}
		if logs("Function." + function) {
			n += 2
			if trigger {
				n++
			}
		}
		return n
	}
	return hostLogging{Timer: count("scan", false), Queue: max(count("poll", true), count("pickup", true))}, nil
}

// repoHostLogging reads the repository's host.json, which the bench stages.
func repoHostLogging() hostLogging {
	root, err := testenv.RepoRoot()
	if err == nil {
		var b []byte
		if b, err = os.ReadFile(filepath.Join(root, "host.json")); err == nil {
			var h hostLogging
			if h, err = parseHostLogging(b); err == nil {
				return h
			}
		}
	}
	panic(fmt.Sprintf("the repository's host.json: %v", err))
}
