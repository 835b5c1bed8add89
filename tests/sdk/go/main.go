// Command sdktest drives a running sbctl daemon with the Azure Service Bus Go SDK
// (azservicebus and its admin package, unchanged) and prints one JSON line:
//
//	{"ok": true, "sdk": "...", "steps": {"<step>": {...} or {"error": "..."}}}
//
// Every step runs on its own entities and its own client (AMQP connection), all at once
// (goroutines), each bounded by a deadline, so the slow ones (lock expiry, TTL, scheduling) overlap. "ok" says the program
// ran every step; whether a step did what it should is for the test reading the report
// (tests/integration/test_amqp_sdk_go.py), so one failing step does not hide the others.
//
// Environment: SBCTL_CONNECTION_STRING, SBCTL_CERT (the daemon's certificate, for the
// admin client over HTTPS), and GO_STEPS (optional, comma-separated: run only these).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// stepTimeout bounds each step; the slowest (lock expiry) needs about 7 s; a step that hangs ends here.
const stepTimeout = 30 * time.Second

type result = map[string]any

type env struct {
	cs     string
	cert   string
	client *azservicebus.Client
}

type step func(ctx context.Context, e *env) (result, error)

var steps = map[string]step{
	"send_receive_complete": sendReceiveComplete,
	"batch_100":             batch100,
	"peek_plain":            func(ctx context.Context, e *env) (result, error) { return peekPaging(ctx, e, "go-peek") },
	"peek_partitioned":      func(ctx context.Context, e *env) (result, error) { return peekPaging(ctx, e, "go-peek-part") },
	"abandon":               abandon,
	"dead_letter":           deadLetter,
	"max_delivery_count":    maxDeliveryCount,
	"ttl_expiry":            ttlExpiry,
	"defer":                 deferStep,
	"schedule_cancel":       scheduleCancel,
	"sessions":              sessions,
	"session_defer":         sessionDefer,
	"renew_message_lock":    renewMessageLock,
	"lock_expiry":           lockExpiry,
	"receive_and_delete":    receiveAndDelete,
	"property_types":        propertyTypes,
	"message_fields":        messageFields,
	"topic_sql_rule_admin":  topicSQLRuleAdmin,
	"batch_size_limits":     batchSizeLimits,
	"auth_failure":          authFailure,
}

// alone: steps run only when GO_STEPS names them (they would disturb the others).
var alone = map[string]step{
	"clock_lock_lost": clockLockLost,
}

func main() {
	cs, cert := os.Getenv("SBCTL_CONNECTION_STRING"), os.Getenv("SBCTL_CERT")
	names := selected()
	out := make(map[string]result, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			r := run(cs, cert, name)
			mu.Lock()
			out[name] = r
			mu.Unlock()
		}(name)
	}
	wg.Wait()
	emit(result{"ok": true, "sdk": "azservicebus " + sdkVersion, "steps": out})
}

// run one step under its deadline, with its own client (its own AMQP connection, so a
// step that breaks its connection breaks no other); a panic or an error becomes the
// step's "error".
func run(cs, cert, name string) (r result) {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			r = result{"error": fmt.Sprintf("panic: %v", p)}
		}
		r["seconds"] = float64(time.Since(start).Milliseconds()) / 1000
	}()
	client, err := azservicebus.NewClientFromConnectionString(cs, nil)
	if err != nil {
		return result{"error": err.Error()}
	}
	defer client.Close(context.Background())
	fn, ok := steps[name]
	if !ok {
		fn = alone[name]
	}
	got, err := fn(ctx, &env{cs: cs, cert: cert, client: client})
	if err != nil {
		return result{"error": err.Error()}
	}
	return got
}

func selected() []string {
	var names []string
	if only := os.Getenv("GO_STEPS"); only != "" {
		names = strings.Split(only, ",")
	} else {
		for name := range steps {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

func emit(r result) {
	text, err := json.Marshal(r)
	if err != nil {
		fail(err)
	}
	fmt.Println(string(text))
}

func fail(err error) {
	emit(result{"ok": false, "error": err.Error()})
	os.Exit(1)
}
