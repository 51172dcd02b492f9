// The Phoenix wire format @supabase/realtime-js speaks (see SUPABASE-NOTES.md, "Wire protocol").
//
//   vsn 1.0.0  text frames: {"topic","event","payload","ref","join_ref"}
//   vsn 2.0.0  text frames: [join_ref, ref, topic, event, payload]
//              binary frames, client → server: kind 3 "userBroadcastPush"
//                [3, len(join_ref), len(ref), len(topic), len(event), len(meta), encoding,
//                 join_ref, ref, topic, event, meta, payload]        (encoding 0 binary, 1 JSON)
//              binary frames, server → client: kind 4 "userBroadcast"
//                [4, len(topic), len(event), len(meta), encoding, topic, event, meta, payload]
//
// The server answers in text for both versions, except a broadcast whose payload is raw bytes,
// which only a 2.0.0 client can receive (as kind 4), as on Supabase.

export type Vsn = '1.0.0' | '2.0.0'

export interface Frame {
  join_ref: string | null
  ref: string | null
  topic: string
  event: string
  payload: unknown
  /**
   * A binary kind-3 push whose payload is raw bytes (encoding 0): `payload` is then
   * `{type: 'broadcast', event}` and the bytes are here.
   */
  bytes?: Buffer
}

const KIND_USER_BROADCAST_PUSH = 3
const KIND_USER_BROADCAST = 4
const ENCODING_BINARY = 0
const ENCODING_JSON = 1

/** 1.x → 1.0.0, 2.x → 2.0.0 (missing: 1.0.0, Phoenix's default); anything else: null. */
export function parseVsn(value: string | null): Vsn | null {
  if (value === null || value === '' || /^1\.\d+\.\d+$/.test(value)) return '1.0.0'
  if (/^2\.\d+\.\d+$/.test(value)) return '2.0.0'
  return null
}

function refValue(value: unknown): string | null | undefined {
  if (value === null || value === undefined) return null
  if (typeof value === 'string') return value
  if (typeof value === 'number' && Number.isFinite(value)) return String(value)
  return undefined
}

function frameFrom(joinRef: unknown, ref: unknown, topic: unknown, event: unknown, payload: unknown): Frame | null {
  const join_ref = refValue(joinRef)
  const reference = refValue(ref)
  if (join_ref === undefined || reference === undefined) return null
  if (typeof topic !== 'string' || typeof event !== 'string' || topic === '' || event === '') return null
  return { join_ref, ref: reference, topic, event, payload: payload ?? {} }
}

/** A text frame of either version (clients are not held to the version they announced); null if malformed. */
export function decodeText(text: string): Frame | null {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    return null
  }
  if (Array.isArray(value)) {
    if (value.length !== 5) return null
    return frameFrom(value[0], value[1], value[2], value[3], value[4])
  }
  if (value && typeof value === 'object') {
    const v = value as Record<string, unknown>
    return frameFrom(v.join_ref, v.ref, v.topic, v.event, v.payload)
  }
  return null
}

/** A binary kind-3 frame as a `broadcast` push; null for any other kind or a truncated frame. */
export function decodeBinary(data: Buffer): Frame | null {
  if (data.length < 7 || data[0] !== KIND_USER_BROADCAST_PUSH) return null
  const [joinRefLength, refLength, topicLength, eventLength, metaLength, encoding] = [
    data[1]!, data[2]!, data[3]!, data[4]!, data[5]!, data[6]!,
  ]
  if (encoding !== ENCODING_BINARY && encoding !== ENCODING_JSON) return null
  let offset = 7
  const take = (length: number): string | null => {
    if (offset + length > data.length) return null
    // realtime-js writes each character's code as one byte.
    const text = data.toString('latin1', offset, offset + length)
    offset += length
    return text
  }
  const joinRef = take(joinRefLength)
  const ref = take(refLength)
  const topic = take(topicLength)
  const event = take(eventLength)
  const meta = take(metaLength)
  if (joinRef === null || ref === null || topic === null || event === null || meta === null) return null
  if (topic === '' || event === '') return null
  const body = data.subarray(offset)
  const frame = { join_ref: joinRef || null, ref: ref || null, topic, event: 'broadcast' }
  if (encoding === ENCODING_BINARY) return { ...frame, payload: { type: 'broadcast', event }, bytes: Buffer.from(body) }
  try {
    // Delivered to other clients as a text broadcast, as a JSON push would be.
    return { ...frame, payload: { type: 'broadcast', event, payload: JSON.parse(body.toString('utf8')) } }
  } catch {
    return null
  }
}

export function encodeText(vsn: Vsn, frame: Frame): string {
  if (vsn === '2.0.0') return JSON.stringify([frame.join_ref, frame.ref, frame.topic, frame.event, frame.payload])
  return JSON.stringify({ topic: frame.topic, event: frame.event, payload: frame.payload, ref: frame.ref, join_ref: frame.join_ref })
}

/** Server → 2.0.0 client: a broadcast with a raw-bytes payload (kind 4). */
export function encodeUserBroadcast(topic: string, event: string, meta: unknown, payload: Uint8Array): Buffer | null {
  const topicBytes = Buffer.from(topic, 'utf8')
  const eventBytes = Buffer.from(event, 'utf8')
  const metaBytes = Buffer.from(meta === undefined ? '' : JSON.stringify(meta), 'utf8')
  if (topicBytes.length > 255 || eventBytes.length > 255 || metaBytes.length > 255) return null
  const header = Buffer.from([KIND_USER_BROADCAST, topicBytes.length, eventBytes.length, metaBytes.length, ENCODING_BINARY])
  return Buffer.concat([header, topicBytes, eventBytes, metaBytes, payload])
}

/** Client → server kind 3 (for tests and tools that speak the protocol by hand). */
export function encodeUserBroadcastPush(
  frame: { join_ref: string | null; ref: string | null; topic: string },
  event: string,
  payload: unknown,
): Buffer {
  const binary = payload instanceof Uint8Array
  const body = binary ? Buffer.from(payload) : Buffer.from(JSON.stringify(payload ?? {}), 'utf8')
  const parts = [frame.join_ref ?? '', frame.ref ?? '', frame.topic, event, ''].map((s) => Buffer.from(s, 'latin1'))
  const header = Buffer.from([
    KIND_USER_BROADCAST_PUSH,
    ...parts.map((p) => p.length),
    binary ? ENCODING_BINARY : ENCODING_JSON,
  ])
  return Buffer.concat([header, ...parts, body])
}
