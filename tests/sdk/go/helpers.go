package main

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus"
)

var sdkVersion = func() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/Azure/azure-sdk-for-go/sdk/messaging/azservicebus" {
				return dep.Version
			}
		}
	}
	return "unknown"
}()

func ptr[T any](v T) *T { return &v }

func text(body string) *azservicebus.Message { return &azservicebus.Message{Body: []byte(body)} }

func send(ctx context.Context, e *env, entity string, msgs ...*azservicebus.Message) error {
	sender, err := e.client.NewSender(entity, nil)
	if err != nil {
		return err
	}
	defer sender.Close(ctx)
	for _, m := range msgs {
		if err := sender.SendMessage(ctx, m, nil); err != nil {
			return fmt.Errorf("send to %s: %w", entity, err)
		}
	}
	return nil
}

type receiver interface {
	ReceiveMessages(ctx context.Context, n int, o *azservicebus.ReceiveMessagesOptions) ([]*azservicebus.ReceivedMessage, error)
}

// receive up to n messages, waiting at most wait for the first; none is not an error.
func receive(ctx context.Context, r receiver, n int, wait time.Duration) ([]*azservicebus.ReceivedMessage, error) {
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	got, err := r.ReceiveMessages(waitCtx, n, nil)
	if err != nil && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		return got, nil
	}
	return got, err
}

// receiveOne: exactly one message within wait, or an error saying none came.
func receiveOne(ctx context.Context, r receiver, wait time.Duration) (*azservicebus.ReceivedMessage, error) {
	got, err := receive(ctx, r, 1, wait)
	if err != nil {
		return nil, err
	}
	if len(got) != 1 {
		return nil, fmt.Errorf("expected 1 message within %s, got %d", wait, len(got))
	}
	return got[0], nil
}

func queueReceiver(e *env, queue string, mode azservicebus.ReceiveMode, sub azservicebus.SubQueue) (*azservicebus.Receiver, error) {
	return e.client.NewReceiverForQueue(queue, &azservicebus.ReceiverOptions{ReceiveMode: mode, SubQueue: sub})
}

func peekLock(e *env, queue string) (*azservicebus.Receiver, error) {
	return queueReceiver(e, queue, azservicebus.ReceiveModePeekLock, 0)
}

func deadLetters(e *env, queue string) (*azservicebus.Receiver, error) {
	return queueReceiver(e, queue, azservicebus.ReceiveModePeekLock, azservicebus.SubQueueDeadLetter)
}

func bodies(msgs []*azservicebus.ReceivedMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = string(m.Body)
	}
	return out
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// code of an azservicebus error ("" when it has none), for the report.
func code(err error) string {
	var sbErr *azservicebus.Error
	if errors.As(err, &sbErr) {
		return string(sbErr.Code)
	}
	return ""
}

func errText(err error) any {
	if err == nil {
		return nil
	}
	return err.Error()
}

// sendAndReceive: send msgs to queue, then receive one with a new peek-lock receiver
// (the caller closes it).
func sendAndReceive(ctx context.Context, e *env, queue string, msgs ...*azservicebus.Message) (*azservicebus.Receiver, *azservicebus.ReceivedMessage, error) {
	if err := send(ctx, e, queue, msgs...); err != nil {
		return nil, nil, err
	}
	r, err := peekLock(e, queue)
	if err != nil {
		return nil, nil, err
	}
	m, err := receiveOne(ctx, r, 10*time.Second)
	if err != nil {
		_ = r.Close(ctx)
		return nil, nil, err
	}
	return r, m, nil
}

// newBatch: a sender on queue and an empty message batch of it (the caller closes the sender).
func newBatch(ctx context.Context, e *env, queue string) (*azservicebus.Sender, *azservicebus.MessageBatch, error) {
	sender, err := e.client.NewSender(queue, nil)
	if err != nil {
		return nil, nil, err
	}
	batch, err := sender.NewMessageBatch(ctx, nil)
	if err != nil {
		sender.Close(ctx)
		return nil, nil, err
	}
	return sender, batch, nil
}

// completeRedelivery: the message a lost lock gives back, received again and completed.
func completeRedelivery(ctx context.Context, r *azservicebus.Receiver) (*azservicebus.ReceivedMessage, error) {
	again, err := receiveOne(ctx, r, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("redelivery: %w", err)
	}
	if err := r.CompleteMessage(ctx, again, nil); err != nil {
		return nil, fmt.Errorf("complete redelivered: %w", err)
	}
	return again, nil
}
