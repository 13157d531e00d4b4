// A scriptable MQTT.js client for telemq's interoperability tests (tests/testsupport/node.py).
//
// Theory of operation
// -------------------
// The script reads commands, one JSON object per line, on stdin and writes what happens, one
// JSON object per line, on stdout; stderr is for diagnostics only. It holds at most one
// MQTT.js client at a time, and forwards what the test asks for to it unchanged: `options`
// objects go straight to `mqtt.connect`, `client.subscribe`, `client.publish`,
// `client.unsubscribe` and `client.end`, so that an MQTT 5.0 test passes
// `protocolVersion: 5` and `properties` without this script knowing about them.
//
// Commands (`id` is optional and echoed back in the command's result):
//   {"op":"connect","id":1,"url":"mqtt://127.0.0.1:1883","options":{...},"trace":false}
//   {"op":"subscribe","id":2,"topic":"a/b" | ["a","b"] | {"a":{"qos":1}},"options":{...}}
//   {"op":"publish","id":3,"topic":"a/b","payload_b64":"aGk=","options":{"qos":1}}
//   {"op":"unsubscribe","id":4,"topic":"a/b" | ["a","b"],"options":{...}}
//   {"op":"end","id":5,"force":false,"options":{...}}   (options: the DISCONNECT's fields)
//   {"op":"exit","id":6}                                  (ends the client and the script)
// End of input is "exit" too.
//
// Events (every one has an "event" field):
//   result      {"event":"result","id":..,"op":..,"ok":true|false, ...}: the outcome of a
//               command: for subscribe `granted` (MQTT.js's list) and `packet` (the SUBACK,
//               whose `granted` holds the return/reason codes); for publish `packet` (the
//               PUBLISH as sent) and `acks` (the PUBACK, or PUBREC and PUBCOMP, received for
//               it, with their reason codes and properties under MQTT 5.0); for unsubscribe
//               `packet` (the UNSUBACK); a failure has `error` (and `packet` when known).
//               Connect's result only says the client was created: the CONNACK comes as a
//               `connect` event (or an `error` event when the server refuses).
//   connect     {"packet": the CONNACK: sessionPresent, returnCode (3.1.1) or reasonCode and
//               properties (5.0)}
//   message     {"topic","payload_b64","qos","retain","dup","messageId","properties",
//               "packet": the whole PUBLISH}
//   error       {"error": {"name","message","code"}}
//   disconnect  {"packet": a DISCONNECT the server sent (MQTT 5.0)}
//   close, offline, end, reconnect: MQTT.js's events of those names, without fields
//   packetsend, packetreceive: every packet, when the connect command had "trace": true
//   fatal       {"error": ...}: a command line that is no JSON object, or an uncaught error
//
// Packets are written as MQTT.js exposes them, with one change: a Buffer anywhere (payload,
// correlation data, authentication data) becomes {"$b64": "<base64>"}; the other way round,
// {"$b64": "..."} anywhere in a command becomes a Buffer. Unless the test says otherwise,
// the client does not reconnect (`reconnectPeriod: 0`): a refused connection must stay refused.
//
// Enhanced authentication: connect's options may hold "scram": {"user","password"}; the
// script then logs in with SCRAM-SHA-256 (RFC 5802/7677, written here with node:crypto on
// MQTT.js's `handleAuth`) and, on CONNACK, emits {"event":"scram","verified":true|false}:
// whether the server's signature in CONNACK proves it knew the password.

import { Buffer } from "node:buffer";
import crypto from "node:crypto";
import process from "node:process";
import readline from "node:readline";

import mqtt from "mqtt";

let client = null;
const acks = new Map(); // messageId -> the PUBACK/PUBREC/PUBCOMP received for it, in order

function toJson(value) {
    if (Buffer.isBuffer(value) || value instanceof Uint8Array) {
        return { $b64: Buffer.from(value).toString("base64") };
    }
    if (Array.isArray(value)) {
        return value.map(toJson);
    }
    if (value !== null && typeof value === "object") {
        const out = {};
        for (const [key, item] of Object.entries(value)) {
            if (item !== undefined && typeof item !== "function") {
                out[key] = toJson(item);
            }
        }
        return out;
    }
    if (typeof value === "bigint") {
        return Number(value);
    }
    return value;
}

function fromJson(value) {
    if (Array.isArray(value)) {
        return value.map(fromJson);
    }
    if (value !== null && typeof value === "object") {
        const keys = Object.keys(value);
        if (keys.length === 1 && keys[0] === "$b64" && typeof value.$b64 === "string") {
            return Buffer.from(value.$b64, "base64");
        }
        const out = {};
        for (const [key, item] of Object.entries(value)) {
            out[key] = fromJson(item);
        }
        return out;
    }
    return value;
}

function emit(event, fields = {}) {
    process.stdout.write(`${JSON.stringify({ event, ...toJson(fields) })}\n`);
}

function describe(error) {
    if (error === null || error === undefined) {
        return null;
    }
    return { name: error.name, message: error.message, code: error.code ?? null };
}

function result(command, ok, fields = {}) {
    emit("result", { id: command.id ?? null, op: command.op, ok, ...fields });
}

function failure(command, error, fields = {}) {
    result(command, false, { error: describe(error), ...fields });
}

function watch(newClient, trace) {
    newClient.on("connect", (packet) => emit("connect", { packet }));
    newClient.on("message", (topic, payload, packet) => {
        emit("message", {
            topic,
            payload_b64: payload.toString("base64"),
            qos: packet.qos,
            retain: packet.retain,
            dup: packet.dup,
            messageId: packet.messageId ?? null,
            properties: packet.properties ?? null,
            packet,
        });
    });
    newClient.on("error", (error) => emit("error", { error: describe(error) }));
    newClient.on("disconnect", (packet) => emit("disconnect", { packet }));
    for (const name of ["close", "offline", "end", "reconnect"]) {
        newClient.on(name, () => emit(name));
    }
    newClient.on("packetreceive", (packet) => {
        if (["puback", "pubrec", "pubcomp"].includes(packet.cmd)) {
            const list = acks.get(packet.messageId) ?? [];
            list.push(packet);
            acks.set(packet.messageId, list);
        }
        if (trace) {
            emit("packetreceive", { packet });
        }
    });
    if (trace) {
        newClient.on("packetsend", (packet) => emit("packetsend", { packet }));
    }
}

function takeAcks(packet) {
    const id = packet?.messageId;
    if (id === undefined) {
        return [];
    }
    const list = acks.get(id) ?? [];
    acks.delete(id);
    return list;
}

const SCRAM = "SCRAM-SHA-256";

function hmac(key, message) {
    return crypto.createHmac("sha256", key).update(message).digest();
}

// The client's side of SCRAM-SHA-256: first(), final(server-first), verify(server-final).
function scramClient(user, password) {
    const nonce = crypto.randomBytes(18).toString("base64");
    const bare = `n=${user.replace(/=/g, "=3D").replace(/,/g, "=2C")},r=${nonce}`;
    let serverSignature = null;
    return {
        first: () => Buffer.from(`n,,${bare}`),
        final(serverFirst) {
            const text = Buffer.from(serverFirst).toString("utf8");
            const attrs = Object.fromEntries(text.split(",").map((part) => [part[0], part.slice(2)]));
            if (!attrs.r.startsWith(nonce)) {
                throw new Error("the server's nonce does not extend the client's");
            }
            const salt = Buffer.from(attrs.s, "base64");
            const salted = crypto.pbkdf2Sync(password, salt, Number(attrs.i), 32, "sha256");
            const withoutProof = `c=biws,r=${attrs.r}`;
            const authMessage = `${bare},${text},${withoutProof}`;
            const clientKey = hmac(salted, "Client Key");
            const storedKey = crypto.createHash("sha256").update(clientKey).digest();
            const signature = hmac(storedKey, authMessage);
            const proof = Buffer.from(clientKey.map((byte, index) => byte ^ signature[index]));
            serverSignature = hmac(hmac(salted, "Server Key"), authMessage);
            return Buffer.from(`${withoutProof},p=${proof.toString("base64")}`);
        },
        verify(serverFinal) {
            const text = serverFinal ? Buffer.from(serverFinal).toString("utf8") : "";
            return serverSignature !== null && text === `v=${serverSignature.toString("base64")}`;
        },
    };
}

function withScram(options, login) {
    const scram = scramClient(login.user, login.password);
    const properties = {
        ...(options.properties ?? {}),
        authenticationMethod: SCRAM,
        authenticationData: scram.first(),
    };
    return [scram, { ...options, properties }];
}

function needClient(command) {
    if (client === null) {
        failure(command, new Error(`${command.op}: no client (send "connect" first)`));
        return false;
    }
    return true;
}

const handlers = {
    connect(command) {
        if (client !== null && client.connected) {
            failure(command, new Error('connect: a client is already connected (send "end")'));
            return;
        }
        if (client !== null) {
            // The previous client ended or never got through: drop it, and its late events.
            client.removeAllListeners();
            client.on("error", () => {});
            client.end(true);
        }
        acks.clear();
        let { scram: login, ...options } = { reconnectPeriod: 0, ...fromJson(command.options ?? {}) };
        let scram = null;
        if (login) {
            [scram, options] = withScram(options, login);
        }
        // Listeners first, then the CONNECT: MQTT.js writes it inside `connect()`.
        client = mqtt.connect(command.url, { ...options, manualConnect: true });
        watch(client, Boolean(command.trace));
        if (scram !== null) {
            client.handleAuth = (packet, callback) => {
                try {
                    const authenticationData = scram.final(packet.properties?.authenticationData);
                    const properties = { authenticationMethod: SCRAM, authenticationData };
                    callback(null, { cmd: "auth", reasonCode: 0x18, properties });
                } catch (error) {
                    callback(error);
                }
            };
            client.on("connect", (packet) => {
                emit("scram", { verified: scram.verify(packet.properties?.authenticationData) });
            });
        }
        client.connect();
        result(command, true);
    },

    subscribe(command) {
        if (!needClient(command)) return;
        client.subscribe(
            fromJson(command.topic),
            fromJson(command.options ?? {}),
            (error, granted, packet) => {
                const fields = { granted: granted ?? null, packet: packet ?? error?.packet ?? null };
                if (error) failure(command, error, fields);
                else result(command, true, fields);
            },
        );
    },

    publish(command) {
        if (!needClient(command)) return;
        const payload = Buffer.from(command.payload_b64 ?? "", "base64");
        client.publish(command.topic, payload, fromJson(command.options ?? {}), (error, packet) => {
            const fields = { packet: packet ?? null, acks: takeAcks(packet) };
            if (error) failure(command, error, fields);
            else result(command, true, fields);
        });
    },

    unsubscribe(command) {
        if (!needClient(command)) return;
        client.unsubscribe(
            fromJson(command.topic),
            fromJson(command.options ?? {}),
            (error, packet) => {
                if (error) failure(command, error, { packet: packet ?? null });
                else result(command, true, { packet: packet ?? null });
            },
        );
    },

    end(command) {
        if (!needClient(command)) return;
        client.end(Boolean(command.force), fromJson(command.options ?? {}), (error) => {
            if (error) failure(command, error);
            else result(command, true);
        });
    },

    exit(command) {
        finish(command);
    },
};

let finishing = false;

function finish(command) {
    if (finishing) return;
    finishing = true;
    const done = () => {
        if (command) result(command, true);
        process.stdout.write("", () => process.exit(0));
    };
    if (client === null) {
        done();
    } else {
        client.end(true, {}, done);
    }
}

function handle(line) {
    if (line.trim() === "") return;
    let command;
    try {
        command = JSON.parse(line);
    } catch (error) {
        emit("fatal", { error: describe(error), line });
        return;
    }
    if (command === null || typeof command !== "object" || Array.isArray(command)) {
        emit("fatal", { error: { name: "TypeError", message: "a command is a JSON object" }, line });
        return;
    }
    const handler = Object.hasOwn(handlers, command.op) ? handlers[command.op] : null;
    if (handler === null) {
        failure(command, new Error(`unknown op ${JSON.stringify(command.op)}`));
        return;
    }
    try {
        handler(command);
    } catch (error) {
        failure(command, error);
    }
}

process.on("uncaughtException", (error) => {
    emit("fatal", { error: describe(error) });
    process.stderr.write(`${error.stack ?? error}\n`);
    process.exit(70);
});

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", handle);
lines.on("close", () => finish(null));
emit("ready", { mqttjs: mqtt.MQTTJS_VERSION ?? null, node: process.version });
