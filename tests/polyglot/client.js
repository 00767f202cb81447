// A leaseq client in Node.js, from proto/leaseq/v1/queue_service.proto alone (no generated code,
// nothing from the Python side): create a queue, start a long poll, send a message (the poll
// wakes up with it), delete it with its receipt.
//
//   npm ci --prefix tests/polyglot && node tests/polyglot/client.js 127.0.0.1:50051 some-queue
//
// Prints one JSON object with what happened; exits non-zero on any failure.
'use strict';

const path = require('node:path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO_ROOT = path.resolve(__dirname, '..', '..', 'proto');
const DEADLINE_MS = 20000;

function loadService() {
  const definition = protoLoader.loadSync('leaseq/v1/queue_service.proto', {
    includeDirs: [PROTO_ROOT],
    keepCase: true, // field names exactly as in the .proto (snake_case)
    longs: String,
    enums: String, // LeaseStatus as 'LEASE_STATUS_OK', ...
    defaults: true,
    oneofs: true,
  });
  return grpc.loadPackageDefinition(definition).leaseq.v1.QueueService;
}

function deadline() {
  return { deadline: Date.now() + DEADLINE_MS };
}

// A unary call as a promise of { reply, trailers }.
function unary(client, method, request, metadata = new grpc.Metadata()) {
  return new Promise((resolve, reject) => {
    let reply;
    const call = client[method](request, metadata, deadline(), (error, response) => {
      if (error) reject(error);
      else reply = response;
    });
    call.on('status', (status) => {
      if (status.code === grpc.status.OK) resolve({ reply, trailers: status.metadata });
    });
  });
}

// A non-follow GetMessages: the stream's responses until it ends.
function longPoll(client, request) {
  return new Promise((resolve, reject) => {
    const messages = [];
    const call = client.GetMessages(request, new grpc.Metadata(), deadline());
    call.on('data', (response) => messages.push(...response.messages));
    call.on('error', reject);
    call.on('end', () => resolve(messages));
  });
}

async function main() {
  const [target, queue] = process.argv.slice(2);
  if (!target || !queue) throw new Error('usage: node client.js HOST:PORT QUEUE');
  const QueueService = loadService();
  const client = new QueueService(target, grpc.credentials.createInsecure());
  try {
    await unary(client, 'CreateQueue', { name: queue, config: { visibility_timeout: { seconds: 60 } } });

    const started = Date.now();
    const polled = longPoll(client, {
      queue,
      max_messages: 10,
      wait_time: { seconds: 20 },
      visibility_timeout: { seconds: 30 },
    });

    const metadata = new grpc.Metadata();
    metadata.set('x-request-id', 'node-send-1');
    const sent = await unary(
      client,
      'SendMessages',
      {
        queue,
        entries: [{ id: 'n1', body: Buffer.from('hello from node'), attributes: { lang: 'js' } }],
      },
      metadata,
    );
    const [result] = sent.reply.results;
    if (result.error) throw new Error(`send failed: ${JSON.stringify(result.error)}`);

    const messages = await polled;
    const waitedMs = Date.now() - started;
    if (messages.length !== 1) throw new Error(`expected one message, got ${messages.length}`);
    const [message] = messages;

    const deleted = await unary(client, 'DeleteMessages', { queue, receipts: [message.receipt] });
    const again = await unary(client, 'DeleteMessages', { queue, receipts: [message.receipt] });

    console.log(
      JSON.stringify({
        sent_id: result.message_id,
        send_request_id: sent.trailers.get('x-request-id')[0] || null,
        received_id: message.message_id,
        body: Buffer.from(message.body).toString('utf8'),
        attributes: message.attributes,
        delivery_count: message.delivery_count,
        has_server_time: Boolean(sent.reply.server_time),
        waited_ms: waitedMs,
        delete_status: deleted.reply.results[0].status,
        delete_again_status: again.reply.results[0].status,
      }),
    );
  } finally {
    client.close();
  }
}

main().catch((error) => {
  console.error(error && error.stack ? error.stack : error);
  process.exit(1);
});
