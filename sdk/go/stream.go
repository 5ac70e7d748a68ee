package sdk

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// EventType is the kind of a streamed event.
type EventType string

// The kinds of streamed events (NDJSON, one a line).
const (
	// EventStdout: a chunk of standard output, as it happened.
	EventStdout EventType = "stdout"
	// EventStderr: a chunk of standard error, as it happened.
	EventStderr EventType = "stderr"
	// EventEnd: the last event, with the whole result.
	EventEnd EventType = "end"
	// EventError: the execution failed after the stream began; never yielded by Stream,
	// which ends with an *ExecutionError instead.
	EventError EventType = "error"
)

// EventTypes lists every event type the SDK knows.
var EventTypes = []EventType{EventStdout, EventStderr, EventEnd, EventError}

// MaxLineBytes bounds one NDJSON line of a stream (an end event carries the artifacts).
const MaxLineBytes = 256 << 20

// Event is one streamed event.
type Event struct {
	// Type is the event's kind; an unknown kind is yielded with Raw only.
	Type EventType
	// Text is the output chunk of a stdout or stderr event.
	Text string
	// Timestamp is when a chunk was read, milliseconds since the Unix epoch.
	Timestamp int64
	// Result is the whole result, in the end event.
	Result *ExecResult
	// Raw is the event's JSON line.
	Raw json.RawMessage
}

// chunkEvent and errorEvent are the wire shapes of the stdout/stderr and error events; the
// end event is an ExecResult beside its type.
type chunkEvent struct {
	Type      EventType `json:"type"`
	Text      string    `json:"text"`
	Timestamp int64     `json:"timestamp"`
}

type errorEvent struct {
	Type  EventType `json:"type"`
	Name  string    `json:"name"`
	Value string    `json:"value"`
}

// Stream is the events of one execution, read as their lines arrive:
//
//	for stream.Next() {
//		ev := stream.Event()
//		…
//	}
//	if err := stream.Err(); err != nil { … }
//
// The last event is EventEnd. A failure after the stream began ends the iteration with Err
// set: an *ExecutionError (the daemon's error event) or ErrDaemonGone (the connection
// broke before the end). Close releases the connection; it is safe to call twice.
type Stream struct {
	op      string
	client  *Client
	ctx     context.Context
	resp    *http.Response
	cancel  context.CancelFunc
	scanner *bufio.Scanner
	event   Event
	err     error
	done    bool
	end     *ExecResult
}

func (c *Client) openStream(ctx context.Context, r request) (*Stream, error) {
	resp, cancel, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	return &Stream{op: r.op(), client: c, ctx: ctx, resp: resp, cancel: cancel, scanner: sc}, nil
}

// Next advances to the next event; false at the end of the stream or on a failure (see Err).
func (s *Stream) Next() bool {
	if s.done {
		return false
	}
	for s.scanner.Scan() {
		line := s.scanner.Bytes()
		if len(line) == 0 {
			continue
		}
		raw := append(json.RawMessage(nil), line...)
		var head struct {
			Type EventType `json:"type"`
		}
		if err := json.Unmarshal(raw, &head); err != nil {
			return s.fail(&DecodeError{Op: s.op, Detail: fmt.Sprintf("event %s: %v", snippet(raw), err)})
		}
		ev := Event{Type: head.Type, Raw: raw}
		switch head.Type {
		case EventStdout, EventStderr:
			var c chunkEvent
			if err := json.Unmarshal(raw, &c); err != nil {
				return s.fail(&DecodeError{Op: s.op, Detail: err.Error()})
			}
			ev.Text, ev.Timestamp = c.Text, c.Timestamp
		case EventEnd:
			var r ExecResult
			if err := json.Unmarshal(raw, &r); err != nil {
				return s.fail(&DecodeError{Op: s.op, Detail: err.Error()})
			}
			ev.Result = &r
			s.end = &r
			s.done = true
			s.event = ev
			s.close()
			return true
		case EventError:
			var e errorEvent
			_ = json.Unmarshal(raw, &e)
			return s.fail(&ExecutionError{Code: e.Name, Message: e.Value})
		}
		s.event = ev
		return true
	}
	err := s.scanner.Err()
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, bufio.ErrTooLong) {
		return s.fail(&DecodeError{Op: s.op, Detail: fmt.Sprintf("an event longer than %d bytes", MaxLineBytes)})
	}
	return s.fail(s.client.transportError(s.ctx, s.op, fmt.Errorf("the stream ended before its end event: %w", err), true))
}

func (s *Stream) fail(err error) bool {
	s.err = err
	s.done = true
	s.close()
	return false
}

// Event returns the event Next advanced to.
func (s *Stream) Event() Event { return s.event }

// Err returns the failure that ended the iteration, nil after a complete stream.
func (s *Stream) Err() error { return s.err }

// Result reads the rest of the stream and returns the end event's result.
func (s *Stream) Result() (*ExecResult, error) {
	for s.Next() {
	}
	if s.err != nil {
		return nil, s.err
	}
	if s.end == nil {
		return nil, &DecodeError{Op: s.op, Detail: "no end event"}
	}
	return s.end, nil
}

// Events returns a channel of the remaining events, closed at the end of the stream; check
// Err after it is closed. Cancel the stream's context (or Close it) to stop early.
func (s *Stream) Events() <-chan Event {
	ch := make(chan Event)
	go func() {
		defer close(ch)
		for s.Next() {
			select {
			case ch <- s.event:
			case <-s.ctx.Done():
				s.fail(s.ctx.Err())
				return
			}
		}
	}()
	return ch
}

// Close releases the stream's connection.
func (s *Stream) Close() error {
	s.done = true
	s.close()
	return nil
}

func (s *Stream) close() {
	if s.resp != nil {
		s.resp.Body.Close()
		s.resp = nil
	}
	if s.cancel != nil {
		s.cancel()
		s.cancel = nil
	}
}
