#!/usr/bin/env python3
"""An application written for Amazon SQS, run against Styx unchanged.

It uses boto3 as-is: only the endpoint differs (STYX_ENDPOINT, default
http://localhost:2319). Credentials come from the usual AWS variables; a Styx
server without --auth accepts any (on loopback), one with --auth needs a Styx
key: AWS_ACCESS_KEY_ID = the key's id (the 16 hex digits after "styx_"),
AWS_SECRET_ACCESS_KEY = the whole key.

The flow: a queue with a dead-letter queue (RedrivePolicy, maxReceiveCount 2),
a message with attributes, a consumer that fails it twice, the message in the
dead-letter queue; a FIFO queue (<prefix>payments.fifo) with a customer's
messages received in order and a resend deduplicated by its body; then a
message move task that brings the dead message back with the same MessageId.
boto3 releases without StartMessageMoveTask (before 1.28) stop before the move
and say how to do it with the styx CLI.

Usage: orders.py [queue-name-prefix]

The queues are named <prefix>orders, <prefix>orders-dlq and
<prefix>payments.fifo; the prefix is a unique one ("example-<8 hex digits>-")
unless given, so the example never meets the queues of the README's tour
(orders, orders-dead) or of an earlier run.
"""
import json
import os
import sys
import time
import uuid

import boto3

prefix = sys.argv[1] if len(sys.argv) > 1 else "example-%s-" % uuid.uuid4().hex[:8]
endpoint = os.environ.get("STYX_ENDPOINT", "http://localhost:2319")
sqs = boto3.client(
    "sqs",
    endpoint_url=endpoint,
    region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
    aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "test"),
    aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "test"),
)


def wait(what, cond, timeout=15):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.1)
    sys.exit(f"timed out waiting for {what}")


dlq_url = sqs.create_queue(QueueName=prefix + "orders-dlq")["QueueUrl"]
dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
queue_url = sqs.create_queue(
    QueueName=prefix + "orders",
    Attributes={
        "VisibilityTimeout": "30",
        "RedrivePolicy": '{"deadLetterTargetArn":"%s","maxReceiveCount":"2"}' % dlq_arn,
    },
)["QueueUrl"]
print("queue", queue_url, "dead-letter queue", dlq_arn)

sent = sqs.send_message(
    QueueUrl=queue_url,
    MessageBody='{"order": 1042, "total": "99.90"}',
    MessageAttributes={"tenant": {"DataType": "String", "StringValue": "acme"},
                       "priority": {"DataType": "Number", "StringValue": "5"}},
)
print("sent", sent["MessageId"])

# A consumer that fails: each receive ends with the message visible again.
for attempt in (1, 2):
    msgs = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5, AttributeNames=["All"],
                               MessageAttributeNames=["All"]).get("Messages", [])
    assert len(msgs) == 1, msgs
    m = msgs[0]
    assert m["MessageId"] == sent["MessageId"], (m["MessageId"], sent["MessageId"])
    assert m["MessageAttributes"]["tenant"]["StringValue"] == "acme"
    print("received", m["MessageId"], "receive count", m["Attributes"]["ApproximateReceiveCount"], "- failing it")
    sqs.change_message_visibility(QueueUrl=queue_url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)

wait("the dead-letter queue", lambda: sqs.get_queue_attributes(
    QueueUrl=dlq_url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]["ApproximateNumberOfMessages"] == "1")
sources = sqs.list_dead_letter_source_queues(QueueUrl=dlq_url)["queueUrls"]
print("dead-lettered; the dead-letter queue's sources:", sources)

# A FIFO queue: a customer's messages in order (MessageGroupId), and a send
# retried with the same body stored once (ContentBasedDeduplication), its
# answer naming the first send's message.
fifo_url = sqs.create_queue(
    QueueName=prefix + "payments.fifo",
    Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
)["QueueUrl"]
paid = sqs.send_message(QueueUrl=fifo_url, MessageBody='{"order": 1042, "step": "paid"}', MessageGroupId="customer-7")
resent = sqs.send_message(QueueUrl=fifo_url, MessageBody='{"order": 1042, "step": "paid"}', MessageGroupId="customer-7")
assert resent["MessageId"] == paid["MessageId"], (resent, paid)
sqs.send_message(QueueUrl=fifo_url, MessageBody='{"order": 1042, "step": "shipped"}', MessageGroupId="customer-7")
steps = []
deadline = time.time() + 15
while len(steps) < 2 and time.time() < deadline:
    for m in sqs.receive_message(QueueUrl=fifo_url, MaxNumberOfMessages=10, WaitTimeSeconds=2,
                                 AttributeNames=["MessageGroupId", "SequenceNumber"]).get("Messages", []):
        assert m["Attributes"]["MessageGroupId"] == "customer-7", m
        steps.append(json.loads(m["Body"])["step"])
        sqs.delete_message(QueueUrl=fifo_url, ReceiptHandle=m["ReceiptHandle"])
assert steps == ["paid", "shipped"], steps
print("FIFO queue: the resend deduplicated, customer-7's messages in order:", steps)

if not hasattr(sqs, "start_message_move_task"):
    print("this boto3 (%s) has no StartMessageMoveTask; move the message back with: styx dead redrive %s --all"
          % (boto3.__version__, prefix + "orders-dlq"))
    sys.exit(0)

task = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
wait("the move task", lambda: sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]["Status"] == "COMPLETED")
msgs = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=5).get("Messages", [])
assert len(msgs) == 1 and msgs[0]["MessageId"] == sent["MessageId"], msgs
sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=msgs[0]["ReceiptHandle"])
print("moved back and processed", msgs[0]["MessageId"])
