// The DOM-lib side of what node-consumer.ts checks without it (tsconfig.json only): where the
// lib declares WebAssembly, `init` takes a compiled WebAssembly.Module and any BufferSource,
// as the DOM-typed signature did (WasmModule must not collapse to `never` here).
import { init, type WasmModule } from 'retry-fetch/manual';

async function main(bytes: BufferSource, compiled: WebAssembly.Module): Promise<void> {
  const module: WasmModule = compiled;
  const back: WebAssembly.Module = module;
  await init(back);
  await init(await WebAssembly.compile(bytes));
  await init(bytes);
  await init(new Uint8Array(8));
  await init(new Response(bytes));
  // (WebAssembly.Module is an empty interface, so under the DOM lib `init` cannot refuse other
  // values by type; node-consumer.ts checks that it does where there is no WebAssembly.)
}
void main;
