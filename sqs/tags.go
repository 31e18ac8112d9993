package sqs

import (
	"context"
	"github.com/styxq/styx/internal/queue"
	"maps"
)

type tagQueueInput struct {
	QueueURL string            `json:"QueueUrl"`
	Tags     map[string]string `json:"Tags"`
	TagKeys  []string          `json:"TagKeys"`
}

type tagsOutput struct {
	Tags map[string]string `json:"Tags,omitempty"`
}

// changeTags applies change to a queue's tags (kept with its SQS
// attributes) and checks the result against SQS's limits.
func (h *Handler) changeTags(ctx context.Context, queueURL string, change func(map[string]string)) error {
	name, err := queueName(queueURL)
	if err != nil {
		return err
	}
	if err := h.allow(ctx, name); err != nil {
		return err
	}
	if _, err := h.cfg.Queues.Get(name); err != nil {
		return errNoQueue
	}
	return h.cfg.Queues.Update(ctx, name, func(info *queue.QueueInfo) error {
		a := readQueueAttrs(*info)
		tags := maps.Clone(a.Tags)
		if tags == nil {
			tags = map[string]string{}
		}
		change(tags)
		if err := checkTags(name, tags); err != nil {
			return err
		}
		a.Tags = tags
		writeQueueAttrs(info, a)
		return nil
	})
}

func (h *Handler) tagQueue(ctx context.Context, r *request) (any, error) {
	var in tagQueueInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if len(in.Tags) == 0 {
		return nil, missingParameter("Tags")
	}
	return nil, h.changeTags(ctx, in.QueueURL, func(tags map[string]string) { maps.Copy(tags, in.Tags) })
}

func (h *Handler) untagQueue(ctx context.Context, r *request) (any, error) {
	var in tagQueueInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	if len(in.TagKeys) == 0 {
		return nil, checkTagKey("")
	}
	for _, k := range in.TagKeys {
		if err := checkTagKey(k); err != nil {
			return nil, err
		}
	}
	return nil, h.changeTags(ctx, in.QueueURL, func(tags map[string]string) {
		for _, k := range in.TagKeys {
			delete(tags, k)
		}
	})
}

func (h *Handler) listQueueTags(ctx context.Context, r *request) (any, error) {
	var in queueURLInput
	if err := r.decode(&in); err != nil {
		return nil, err
	}
	_, info, err := h.lookup(ctx, in.QueueURL)
	if err != nil {
		return nil, err
	}
	return tagsOutput{Tags: readQueueAttrs(info).Tags}, nil
}
