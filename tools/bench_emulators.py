"""Times the calls the relays make on each local emulator (docs/benchmarks.md, "The emulators").

Usage, against running emulators (scripts/emulator.sh start; eval "$(scripts/emulator.sh env)"):
    .venv/bin/python tools/bench_emulators.py [ITEMS]

For DynamoDB it runs the same calls against DynamoDB Local (AWS_ENDPOINT_URL_DYNAMODB) and against
moto's DynamoDB (AWS_ENDPOINT_URL), on a table of ITEMS pending outbox-shaped items (default 4,400)
with a sparse GSI1: one 100-item page of a GSI1 partition, and a conditional status update that
removes the index keys, each the median of 50 calls. For EventBridge (moto) it times PutEvents of
10 entries on a bus whose rule delivers to an SQS queue, one client, 200 calls.
"""

import json
import os
import statistics
import sys
import time

import boto3

ITEMS = int(sys.argv[1]) if len(sys.argv) > 1 else 4400
SHARDS = 16
CREDENTIALS = dict(region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing")


def median_ms(call, runs=50):
    times = []
    for i in range(runs):
        started = time.perf_counter()
        call(i)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def dynamodb(endpoint):
    client = boto3.client("dynamodb", endpoint_url=endpoint, **CREDENTIALS)
    table = f"bench-{time.time_ns()}"
    client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}, {"AttributeName": "SK", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": "S"} for name in ("PK", "SK", "GSI1PK", "GSI1SK")
        ],
        GlobalSecondaryIndexes=[{
            "IndexName": "GSI1",
            "KeySchema": [{"AttributeName": "GSI1PK", "KeyType": "HASH"}, {"AttributeName": "GSI1SK", "KeyType": "RANGE"}],
            "Projection": {"ProjectionType": "ALL"},
        }],
        BillingMode="PAY_PER_REQUEST",
    )
    for start in range(0, ITEMS, 25):
        client.batch_write_item(RequestItems={table: [
            {"PutRequest": {"Item": {
                "PK": {"S": f"USER#{i % 97}"}, "SK": {"S": f"OUTBOX#{i:08}"},
                "Status": {"S": "PENDING"}, "Payload": {"S": json.dumps({"i": i, "pad": "x" * 300})},
                "GSI1PK": {"S": f"OUTBOX#PENDING#{i % SHARDS}"}, "GSI1SK": {"S": f"EVENT#{i:08}"},
            }}} for i in range(start, min(start + 25, ITEMS))
        ]})
    query = median_ms(lambda i: client.query(
        TableName=table, IndexName="GSI1", Limit=100,
        KeyConditionExpression="GSI1PK = :pk", ExpressionAttributeValues={":pk": {"S": f"OUTBOX#PENDING#{i % SHARDS}"}},
    ))
    update = median_ms(lambda i: client.update_item(
        TableName=table, Key={"PK": {"S": f"USER#{i % 97}"}, "SK": {"S": f"OUTBOX#{i:08}"}},
        UpdateExpression="SET #s = :published REMOVE GSI1PK, GSI1SK",
        ConditionExpression="attribute_exists(GSI1PK)",
        ExpressionAttributeNames={"#s": "Status"}, ExpressionAttributeValues={":published": {"S": "PUBLISHED"}},
    ))
    client.delete_table(TableName=table)
    return query, update


def put_events(endpoint, calls=200):
    events = boto3.client("events", endpoint_url=endpoint, **CREDENTIALS)
    sqs = boto3.client("sqs", endpoint_url=endpoint, **CREDENTIALS)
    name = f"bench-{time.time_ns()}"
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="all", EventBusName=name, EventPattern=json.dumps({"source": [{"prefix": ""}]}))
    events.put_targets(Rule="all", EventBusName=name, Targets=[{"Id": "sink", "Arn": arn}])
    started = time.perf_counter()
    for i in range(calls):
        events.put_events(Entries=[
            {"EventBusName": name, "Source": "bench", "DetailType": "Bench", "Detail": json.dumps({"i": i, "j": j})}
            for j in range(10)
        ])
    return calls * 10 / (time.perf_counter() - started)


if __name__ == "__main__":
    for label, endpoint in (("DynamoDB Local", os.environ["AWS_ENDPOINT_URL_DYNAMODB"]),
                            ("moto DynamoDB", os.environ["AWS_ENDPOINT_URL"])):
        query, update = dynamodb(endpoint)
        print(f"{label}: {ITEMS} items, GSI1 page of 100 {query:.1f} ms, conditional update {update:.1f} ms (medians of 50)")
    print(f"moto EventBridge: PutEvents of 10 entries with a rule to SQS, {put_events(os.environ['AWS_ENDPOINT_URL']):.0f} entries/s")
