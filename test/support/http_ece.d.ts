// http_ece (dev dependency of the Web Push stand-in) ships no types; what the tests use of it.
declare module 'http_ece' {
  import type { ECDH } from 'node:crypto'
  interface Params {
    version: 'aes128gcm' | 'aesgcm'
    privateKey?: ECDH
    authSecret?: Buffer
    dh?: Buffer
  }
  const ece: {
    decrypt(buffer: Buffer, params: Params): Buffer
    encrypt(buffer: Buffer, params: Params): Buffer
  }
  export default ece
}
