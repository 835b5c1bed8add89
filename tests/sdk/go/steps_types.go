package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"sort"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus/admin"
	"github.com/Azure/go-amqp"
)

var stamp = time.Date(2026, 11, 28, 12, 34, 56, 789_000_000, time.UTC)

// sentProperties: one application property of every type the Go SDK sends (go-amqp
// encodes each Go type as its own AMQP type).
func sentProperties() map[string]any {
	return map[string]any{
		"int64":   int64(42),
		"int32":   int32(-7),
		"int16":   int16(-300),
		"int8":    int8(-5),
		"uint8":   uint8(200),
		"uint16":  uint16(60000),
		"uint32":  uint32(4_000_000_000),
		"uint64":  uint64(18_000_000_000_000_000_000),
		"float32": float32(2.5),
		"float64": float64(3.25),
		"bool":    true,
		"string":  "text",
		"time":    stamp,
		"uuid":    amqp.UUID{0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8},
		"binary":  []byte{0, 1, 2, 255},
		"symbol":  amqp.Symbol("sym"),
	}
}

func describe(v any) string {
	if t, ok := v.(time.Time); ok {
		return fmt.Sprintf("time.Time %s", t.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%T %v", v, v)
}

func propertyTypes(ctx context.Context, e *env) (result, error) {
	sent := sentProperties()
	m := text("typed")
	m.ApplicationProperties = sent
	r, got, err := sendAndReceive(ctx, e, "go-props", m)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := r.CompleteMessage(ctx, got, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	exact := []string{}
	differ := map[string]string{}
	for k, v := range sent {
		back, ok := got.ApplicationProperties[k]
		if !ok {
			differ[k] = "missing"
			continue
		}
		same := reflect.DeepEqual(back, v)
		if t, isTime := back.(time.Time); isTime {
			same = t.Equal(stamp)
		}
		if same {
			exact = append(exact, k)
		} else {
			differ[k] = fmt.Sprintf("sent %s, received %s", describe(v), describe(back))
		}
	}
	sort.Strings(exact)
	return result{"exact": exact, "differ": differ}, nil
}

// messageFields: every settable field of a message, read back as received (the message
// is scheduled a second ahead, so ScheduledEnqueueTime is exercised too).
func messageFields(ctx context.Context, e *env) (result, error) {
	at := time.Now().Add(time.Second).Truncate(time.Millisecond).UTC()
	m := &azservicebus.Message{
		Body:                 []byte("fields"),
		MessageID:            ptr("mid-1"),
		CorrelationID:        ptr("corr-1"),
		Subject:              ptr("subject-1"),
		To:                   ptr("to-1"),
		ReplyTo:              ptr("reply-queue"),
		ReplyToSessionID:     ptr("reply-session"),
		ContentType:          ptr("application/json"),
		TimeToLive:           ptr(90 * time.Minute),
		PartitionKey:         ptr("pk-1"),
		ScheduledEnqueueTime: &at,
	}
	r, got, err := sendAndReceive(ctx, e, "go-fields", m)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := r.CompleteMessage(ctx, got, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	var ttl any
	if got.TimeToLive != nil {
		ttl = got.TimeToLive.Seconds()
	}
	var scheduled any
	if got.ScheduledEnqueueTime != nil {
		scheduled = got.ScheduledEnqueueTime.Equal(at)
	}
	return result{
		"MessageID": got.MessageID, "CorrelationID": deref(got.CorrelationID),
		"Subject": deref(got.Subject), "To": deref(got.To), "ReplyTo": deref(got.ReplyTo),
		"ReplyToSessionID": deref(got.ReplyToSessionID), "ContentType": deref(got.ContentType),
		"TimeToLiveSeconds": ttl, "PartitionKey": deref(got.PartitionKey),
		"ScheduledEnqueueTimeKept":  scheduled,
		"EnqueuedNotBeforeSchedule": got.EnqueuedTime != nil && !got.EnqueuedTime.Before(at.Add(-50*time.Millisecond)),
		"ExpiresAtSet":              got.ExpiresAt != nil,
	}, nil
}

// adminClient: the SDK's admin client as an application writes it, with the daemon's
// certificate trusted (the daemon answers HTTPS on the connection string's port).
func adminClient(e *env) (*admin.Client, error) {
	pem, err := os.ReadFile(e.cert)
	if err != nil {
		return nil, fmt.Errorf("the daemon's certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", e.cert)
	}
	transport := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	return admin.NewClientFromConnectionString(e.cs, &admin.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: transport},
	})
}

// topicSQLRuleAdmin: topic, subscription and a SQL rule (filter + action) made with the
// admin client; only the matching message arrives, changed by the action.
func topicSQLRuleAdmin(ctx context.Context, e *env) (result, error) {
	ac, err := adminClient(e)
	if err != nil {
		return nil, err
	}
	if _, err := ac.CreateTopic(ctx, "go-topic", nil); err != nil {
		return nil, fmt.Errorf("create topic: %w", err)
	}
	if _, err := ac.CreateSubscription(ctx, "go-topic", "red", nil); err != nil {
		return nil, fmt.Errorf("create subscription: %w", err)
	}
	if _, err := ac.DeleteRule(ctx, "go-topic", "red", "$Default", nil); err != nil {
		return nil, fmt.Errorf("delete $Default: %w", err)
	}
	rule := &admin.CreateRuleOptions{
		Name:   ptr("red-only"),
		Filter: &admin.SQLFilter{Expression: "color = 'red'"},
		Action: &admin.SQLAction{Expression: "SET seen = 'yes'"},
	}
	if _, err := ac.CreateRule(ctx, "go-topic", "red", rule); err != nil {
		return nil, fmt.Errorf("create rule: %w", err)
	}
	var rules []string
	pager := ac.NewListRulesPager("go-topic", "red", nil)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		for _, r := range page.Rules {
			rules = append(rules, fmt.Sprintf("%s:%T", r.Name, r.Filter))
		}
	}
	var msgs []*azservicebus.Message
	for _, color := range []string{"blue", "red"} {
		m := text(color + "-event")
		m.ApplicationProperties = map[string]any{"color": color}
		msgs = append(msgs, m)
	}
	if err := send(ctx, e, "go-topic", msgs...); err != nil {
		return nil, err
	}
	r, err := e.client.NewReceiverForSubscription("go-topic", "red", nil)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	red, err := receiveOne(ctx, r, 10*time.Second)
	if err != nil {
		return nil, err
	}
	more, err := receive(ctx, r, 10, time.Second)
	if err != nil {
		return nil, err
	}
	got := append([]*azservicebus.ReceivedMessage{red}, more...)
	var seen []any
	for _, m := range got {
		seen = append(seen, m.ApplicationProperties["seen"])
		if err := r.CompleteMessage(ctx, m, nil); err != nil {
			return nil, fmt.Errorf("complete: %w", err)
		}
	}
	runtime, err := ac.GetSubscriptionRuntimeProperties(ctx, "go-topic", "red", nil)
	if err != nil {
		return nil, fmt.Errorf("runtime properties: %w", err)
	}
	return result{"rules": rules, "received": bodies(got), "seen": seen,
		"active_after": runtime.ActiveMessageCount}, nil
}
