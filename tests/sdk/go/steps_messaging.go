package main

import (
	"context"
	"fmt"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

func sendReceiveComplete(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-basic", text("hello"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	left, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return result{"body": string(m.Body), "delivery_count": m.DeliveryCount,
		"sequence_number": deref(m.SequenceNumber), "left": len(left)}, nil
}

func batch100(ctx context.Context, e *env) (result, error) {
	sender, batch, err := newBatch(ctx, e, "go-batch")
	if err != nil {
		return nil, err
	}
	defer sender.Close(ctx)
	for i := 0; i < 100; i++ {
		if err := batch.AddMessage(text(fmt.Sprintf("m%03d", i)), nil); err != nil {
			return nil, fmt.Errorf("add %d: %w", i, err)
		}
	}
	if err := sender.SendMessageBatch(ctx, batch, nil); err != nil {
		return nil, err
	}
	r, err := queueReceiver(e, "go-batch", azservicebus.ReceiveModeReceiveAndDelete, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	var got []string
	seqs := map[int64]bool{}
	for len(got) < 100 {
		msgs, err := receive(ctx, r, 100-len(got), 5*time.Second)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			seqs[*m.SequenceNumber] = true
		}
		got = append(got, bodies(msgs)...)
	}
	inOrder := true
	for i, b := range got {
		inOrder = inOrder && b == fmt.Sprintf("m%03d", i)
	}
	return result{"received": len(got), "in_order": inOrder, "distinct_sequence_numbers": len(seqs)}, nil
}

// peekPaging: 40 messages (on a partitioned queue spread by partition key), peeked 7 at
// a time, each page from the last sequence number seen + 1.
func peekPaging(ctx context.Context, e *env, queue string) (result, error) {
	var msgs []*azservicebus.Message
	for i := 0; i < 40; i++ {
		m := text(fmt.Sprintf("p%02d", i))
		m.PartitionKey = ptr(fmt.Sprintf("key-%d", i%9))
		msgs = append(msgs, m)
	}
	if err := send(ctx, e, queue, msgs...); err != nil {
		return nil, err
	}
	r, err := peekLock(e, queue)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	seen := map[string]int{}
	var pages []int
	var from *int64
	for len(pages) < 20 {
		page, err := r.PeekMessages(ctx, 7, &azservicebus.PeekMessagesOptions{FromSequenceNumber: from})
		if err != nil {
			return nil, fmt.Errorf("peek page %d: %w", len(pages), err)
		}
		pages = append(pages, len(page))
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			seen[string(m.Body)]++
			if from == nil || *m.SequenceNumber+1 > *from {
				from = ptr(*m.SequenceNumber + 1)
			}
		}
	}
	twice := 0
	for _, n := range seen {
		if n > 1 {
			twice++
		}
	}
	return result{"distinct": len(seen), "seen_twice": twice, "pages": pages}, nil
}

func abandon(ctx context.Context, e *env) (result, error) {
	r, first, err := sendAndReceive(ctx, e, "go-abandon", text("again"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := r.AbandonMessage(ctx, first, nil); err != nil {
		return nil, fmt.Errorf("abandon: %w", err)
	}
	second, err := receiveOne(ctx, r, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := r.CompleteMessage(ctx, second, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	return result{"delivery_counts": []uint32{first.DeliveryCount, second.DeliveryCount}}, nil
}

func deadLetter(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-dlq", text("poison"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	opts := &azservicebus.DeadLetterOptions{Reason: ptr("bad-order"), ErrorDescription: ptr("total is negative")}
	if err := r.DeadLetterMessage(ctx, m, opts); err != nil {
		return nil, fmt.Errorf("dead-letter: %w", err)
	}
	return fromDeadLetters(ctx, e, "go-dlq")
}

// fromDeadLetters: the one message of queue's DLQ (completed), its reason and description.
func fromDeadLetters(ctx context.Context, e *env, queue string) (result, error) {
	dlq, err := deadLetters(e, queue)
	if err != nil {
		return nil, err
	}
	defer dlq.Close(ctx)
	d, err := receiveOne(ctx, dlq, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("dead-letter queue: %w", err)
	}
	if err := dlq.CompleteMessage(ctx, d, nil); err != nil {
		return nil, fmt.Errorf("complete from the dead-letter queue: %w", err)
	}
	return result{"body": string(d.Body), "reason": deref(d.DeadLetterReason),
		"description": deref(d.DeadLetterErrorDescription), "source": deref(d.DeadLetterSource)}, nil
}

// maxDeliveryCount: go-maxdel has MaxDeliveryCount 2: two abandons dead-letter it.
func maxDeliveryCount(ctx context.Context, e *env) (result, error) {
	if err := send(ctx, e, "go-maxdel", text("twice")); err != nil {
		return nil, err
	}
	r, err := peekLock(e, "go-maxdel")
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	for i := 0; i < 2; i++ {
		m, err := receiveOne(ctx, r, 10*time.Second)
		if err != nil {
			return nil, fmt.Errorf("delivery %d: %w", i+1, err)
		}
		if err := r.AbandonMessage(ctx, m, nil); err != nil {
			return nil, fmt.Errorf("abandon %d: %w", i+1, err)
		}
	}
	left, err := receive(ctx, r, 1, time.Second)
	if err != nil {
		return nil, err
	}
	out, err := fromDeadLetters(ctx, e, "go-maxdel")
	if out != nil {
		out["left_in_queue"] = len(left)
	}
	return out, err
}

// ttlExpiry: go-ttl dead-letters expired messages; a 1 s TTL message ends up there.
func ttlExpiry(ctx context.Context, e *env) (result, error) {
	m := text("short-lived")
	m.TimeToLive = ptr(time.Second)
	if err := send(ctx, e, "go-ttl", m); err != nil {
		return nil, err
	}
	time.Sleep(1500 * time.Millisecond)
	r, err := peekLock(e, "go-ttl")
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	left, err := receive(ctx, r, 1, time.Second)
	if err != nil {
		return nil, err
	}
	out, err := fromDeadLetters(ctx, e, "go-ttl")
	if out != nil {
		out["received_from_queue"] = len(left)
	}
	return out, err
}

func deferStep(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-defer", text("later"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	if err := r.DeferMessage(ctx, m, nil); err != nil {
		return nil, fmt.Errorf("defer: %w", err)
	}
	got, err := r.ReceiveDeferredMessages(ctx, []int64{*m.SequenceNumber}, nil)
	if err != nil {
		return nil, fmt.Errorf("receive deferred: %w", err)
	}
	if len(got) != 1 {
		return nil, fmt.Errorf("receive deferred: %d messages", len(got))
	}
	d := got[0]
	out := result{"body": string(d.Body), "state": int(d.State), "same_lock_token_as_first": d.LockToken == m.LockToken}
	out["complete_error"] = errText(r.CompleteMessage(ctx, d, nil))
	left, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	out["left"] = len(left)
	return out, nil
}

// scheduleCancel: one message scheduled 2 s ahead (received then), one an hour ahead
// (peeked as scheduled, then cancelled: never seen again).
func scheduleCancel(ctx context.Context, e *env) (result, error) {
	sender, err := e.client.NewSender("go-sched", nil)
	if err != nil {
		return nil, err
	}
	defer sender.Close(ctx)
	at := time.Now().Add(2 * time.Second)
	soon, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{text("soon")}, at, nil)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	later, err := sender.ScheduleMessages(ctx, []*azservicebus.Message{text("cancelled")}, time.Now().Add(time.Hour), nil)
	if err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	r, err := peekLock(e, "go-sched")
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	states := map[string]int{}
	if err := peekStates(ctx, r, states); err != nil {
		return nil, err
	}
	if err := sender.CancelScheduledMessages(ctx, later, nil); err != nil {
		return nil, fmt.Errorf("cancel: %w", err)
	}
	after := map[string]int{}
	if err := peekStates(ctx, r, after); err != nil {
		return nil, err
	}
	m, err := receiveOne(ctx, r, 10*time.Second)
	if err != nil {
		return nil, err
	}
	late := time.Since(at)
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	return result{"sequence_numbers": [][]int64{soon, later}, "cancelled_state_before": states["cancelled"],
		"peeked_after_cancel": len(after), "cancelled_after_cancel": after["cancelled"] != 0,
		"received": string(m.Body), "late_ms": late.Milliseconds(),
		"enqueued_at_scheduled_time": m.ScheduledEnqueueTime != nil}, nil
}

// peekStates: body -> state of what a peek from the start sees.
func peekStates(ctx context.Context, r *azservicebus.Receiver, into map[string]int) error {
	peeked, err := r.PeekMessages(ctx, 10, &azservicebus.PeekMessagesOptions{FromSequenceNumber: ptr(int64(1))})
	if err != nil {
		return fmt.Errorf("peek: %w", err)
	}
	for _, p := range peeked {
		into[string(p.Body)] = int(p.State)
	}
	return nil
}
