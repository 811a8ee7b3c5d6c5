"""The README tour, runnable: produce, consume, and one consume-transform-produce
transaction against a running `make run` (or any service URL given as argument).

    .venv/bin/python examples/produce_consume.py [http://localhost:8080]
"""

import sys
import uuid

import magnetar

url = sys.argv[1] if len(sys.argv) > 1 else "http://localhost:8080"
run = uuid.uuid4().hex[:6]  # fresh topics each run
client = magnetar.Client(url)

producer = client.create_producer(f"orders-{run}", producer_name=f"orders-writer-{run}")
for i in range(3):
    msg_id = producer.send(f"order-{i}".encode(), partition_key=f"customer-{i}")
    print("sent", msg_id)

consumer = client.subscribe(f"orders-{run}", "billing", consumer_type=magnetar.ConsumerType.Shared,
                            initial_position=magnetar.InitialPosition.Earliest)
invoices = client.create_producer(f"invoices-{run}")
for _ in range(3):
    msg = consumer.receive(timeout_millis=5000)
    with client.new_transaction() as txn:  # commits the send and the ack together
        invoices.send(b"invoice for " + msg.data(), txn=txn)
        consumer.acknowledge(msg, txn=txn)
    print("invoiced", msg.data().decode(), "in transaction", txn.txn_id)

reader = client.create_reader(f"invoices-{run}", magnetar.MessageId.earliest)
while reader.has_message_available():
    print("read", reader.read_next(timeout_millis=5000).data().decode())
client.close()
