package sqs

import (
	"net/url"
	"testing"
)

// FuzzFormToJSON: any query-protocol form either converts or is refused
// with an SQS error; it never panics.
func FuzzFormToJSON(f *testing.F) {
	for _, s := range []string{
		"Action=CreateQueue&QueueName=q&Attribute.1.Name=VisibilityTimeout&Attribute.1.Value=30&Tag.1.Key=a&Tag.1.Value=b",
		"SendMessageBatchRequestEntry.1.Id=a&SendMessageBatchRequestEntry.1.MessageAttribute.1.Name=n&SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType=String",
		"AttributeName.1=All&AttributeName.2=x&MaxNumberOfMessages=10",
		"Attribute.x.Name=a", "a..b=1", "Attribute=1&Attribute.1.Name=2", "WaitTimeSeconds=soon", "Tag.0.Key=k",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		form, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		for _, action := range []string{"CreateQueue", "SendMessageBatch"} {
			if _, err := formToJSON(action, form); err != nil {
				if _, ok := err.(*Error); !ok {
					t.Fatalf("%q: not an SQS error: %v", raw, err)
				}
			}
		}
	})
}
