package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

// sessions on go-sess: next available (the only session with messages, "A"), its state
// set and read back, its lock renewed; then "B" by name.
func sessions(ctx context.Context, e *env) (result, error) {
	var msgs []*azservicebus.Message
	for _, s := range []string{"A:a1", "A:a2", "B:b1"} {
		m := text(s[2:])
		m.SessionID = ptr(s[:1])
		msgs = append(msgs, m)
	}
	if err := send(ctx, e, "go-sess", msgs...); err != nil {
		return nil, err
	}
	next, err := e.client.AcceptNextSessionForQueue(ctx, "go-sess", nil)
	if err != nil {
		return nil, fmt.Errorf("accept next: %w", err)
	}
	defer next.Close(ctx)
	out := result{"next_session": next.SessionID()}
	got, err := drainSession(ctx, next)
	if err != nil {
		return nil, err
	}
	out["next_received"] = got
	if err := next.SetSessionState(ctx, []byte("checkpoint-1"), nil); err != nil {
		return nil, fmt.Errorf("set state: %w", err)
	}
	state, err := next.GetSessionState(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("get state: %w", err)
	}
	out["state"] = string(state)
	before := next.LockedUntil()
	time.Sleep(1100 * time.Millisecond)
	if err := next.RenewSessionLock(ctx, nil); err != nil {
		return nil, fmt.Errorf("renew session lock: %w", err)
	}
	out["renew_extended_ms"] = next.LockedUntil().Sub(before).Milliseconds()
	named, err := e.client.AcceptSessionForQueue(ctx, "go-sess", "B", nil)
	if err != nil {
		return nil, fmt.Errorf("accept B: %w", err)
	}
	defer named.Close(ctx)
	out["named_session"] = named.SessionID()
	if out["named_received"], err = drainSession(ctx, named); err != nil {
		return nil, err
	}
	return out, nil
}

// drainSession: receive and complete what the session has (bodies, in order).
func drainSession(ctx context.Context, s *azservicebus.SessionReceiver) ([]string, error) {
	var got []string
	for {
		msgs, err := receive(ctx, s, 10, 2*time.Second)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", s.SessionID(), err)
		}
		if len(msgs) == 0 {
			return got, nil
		}
		for _, m := range msgs {
			if err := s.CompleteMessage(ctx, m, nil); err != nil {
				return nil, fmt.Errorf("complete in session %s: %w", s.SessionID(), err)
			}
		}
		got = append(got, bodies(msgs)...)
		if len(got) >= 2 {
			return got, nil
		}
	}
}

func renewMessageLock(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-renew", text("hold"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	before := *m.LockedUntil
	time.Sleep(1100 * time.Millisecond)
	if err := r.RenewMessageLock(ctx, m, nil); err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	extended := m.LockedUntil.Sub(before)
	if err := r.CompleteMessage(ctx, m, nil); err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	return result{"extended_ms": extended.Milliseconds()}, nil
}

// lockExpiry: go-lockexp has a 5 s lock; past it, completing fails with lock lost and the
// message comes again, delivered a second time.
func lockExpiry(ctx context.Context, e *env) (result, error) {
	r, m, err := sendAndReceive(ctx, e, "go-lockexp", text("slow"))
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	lock := m.LockedUntil.Sub(time.Now())
	time.Sleep(time.Until(*m.LockedUntil) + 700*time.Millisecond)
	completeErr := r.CompleteMessage(ctx, m, nil)
	again, err := completeRedelivery(ctx, r)
	if err != nil {
		return nil, err
	}
	return result{"lock_seconds": lock.Seconds(), "complete_code": code(completeErr),
		"complete_error": errText(completeErr), "delivery_count_again": again.DeliveryCount}, nil
}

func receiveAndDelete(ctx context.Context, e *env) (result, error) {
	if err := send(ctx, e, "go-rad", text("once"), text("twice")); err != nil {
		return nil, err
	}
	r, err := queueReceiver(e, "go-rad", azservicebus.ReceiveModeReceiveAndDelete, 0)
	if err != nil {
		return nil, err
	}
	defer r.Close(ctx)
	var got []*azservicebus.ReceivedMessage
	for len(got) < 2 {
		msgs, err := receive(ctx, r, 2, 5*time.Second)
		if err != nil {
			return nil, err
		}
		if len(msgs) == 0 {
			break
		}
		got = append(got, msgs...)
	}
	settleErr := error(nil)
	if len(got) > 0 {
		settleErr = r.CompleteMessage(ctx, got[0], nil)
	}
	left, err := r.PeekMessages(ctx, 10, nil)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return result{"received": bodies(got), "left": len(left), "complete_refused": settleErr != nil}, nil
}

// batchSizeLimits: the batch's limit is the link's max-message-size the daemon announced;
// 10 KiB messages fill it until ErrMessageTooLarge; a single message over the limit is
// refused by the daemon.
func batchSizeLimits(ctx context.Context, e *env) (result, error) {
	sender, batch, err := newBatch(ctx, e, "go-limits")
	if err != nil {
		return nil, err
	}
	defer sender.Close(ctx)
	chunk := strings.Repeat("x", 10*1024)
	added := 0
	for ; added < 1000; added++ {
		err := batch.AddMessage(text(chunk), nil)
		if errors.Is(err, azservicebus.ErrMessageTooLarge) {
			break
		} else if err != nil {
			return nil, err
		}
	}
	out := result{"added": added, "batch_bytes": batch.NumBytes()}
	out["send_full_batch_error"] = errText(sender.SendMessageBatch(ctx, batch, nil))
	small, err := sender.NewMessageBatch(ctx, &azservicebus.MessageBatchOptions{MaxBytes: 4096})
	if err != nil {
		return nil, err
	}
	out["small_batch_add_10k"] = errText(small.AddMessage(text(chunk), nil))
	tooBig := text(strings.Repeat("y", 2*1024*1024))
	bigErr := sender.SendMessage(ctx, tooBig, nil)
	out["send_2mib_error"] = errText(bigErr)
	out["send_2mib_code"] = code(bigErr)
	return out, nil
}

// authFailure: a client with a wrong key; the error the application gets says why.
func authFailure(ctx context.Context, e *env) (result, error) {
	cs := e.cs
	i := strings.Index(cs, "SharedAccessKey=")
	if i < 0 {
		return nil, fmt.Errorf("no SharedAccessKey in the connection string")
	}
	end := strings.Index(cs[i:], ";")
	wrong := cs[:i] + "SharedAccessKey=d3Jvbmcta2V5" + cs[i+end:]
	client, err := azservicebus.NewClientFromConnectionString(wrong, &azservicebus.ClientOptions{
		RetryOptions: azservicebus.RetryOptions{MaxRetries: -1},
	})
	if err != nil {
		return nil, err
	}
	defer client.Close(ctx)
	sender, err := client.NewSender("go-basic", nil)
	if err != nil {
		return nil, err
	}
	sendCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sendErr := sender.SendMessage(sendCtx, text("never"), nil)
	return result{"send_error": errText(sendErr), "code": code(sendErr)}, nil
}

// sessionDefer: inside a named session (go-sess-defer, session "D"), defer a message, peek
// it, receive it by sequence number and complete it: the SDK's management link for a
// session carries the session filter (described) and the session id.
func sessionDefer(ctx context.Context, e *env) (result, error) {
	m := text("in-session")
	m.SessionID = ptr("D")
	if err := send(ctx, e, "go-sess-defer", m); err != nil {
		return nil, err
	}
	s, err := e.client.AcceptSessionForQueue(ctx, "go-sess-defer", "D", nil)
	if err != nil {
		return nil, fmt.Errorf("accept D: %w", err)
	}
	defer s.Close(ctx)
	got, err := receiveOne(ctx, s, 10*time.Second)
	if err != nil {
		return nil, err
	}
	if err := s.DeferMessage(ctx, got, nil); err != nil {
		return nil, fmt.Errorf("defer: %w", err)
	}
	peeked, err := s.PeekMessages(ctx, 10, nil)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	deferred, err := s.ReceiveDeferredMessages(ctx, []int64{*got.SequenceNumber}, nil)
	if err != nil {
		return nil, fmt.Errorf("receive deferred: %w", err)
	}
	if len(deferred) != 1 {
		return nil, fmt.Errorf("receive deferred: %d messages", len(deferred))
	}
	completeErr := s.CompleteMessage(ctx, deferred[0], nil)
	left, err := s.PeekMessages(ctx, 10, nil)
	if err != nil {
		return nil, fmt.Errorf("peek: %w", err)
	}
	return result{"peeked": bodies(peeked), "deferred": string(deferred[0].Body),
		"session": deref(deferred[0].SessionID), "complete_error": errText(completeErr), "left": len(left)}, nil
}
