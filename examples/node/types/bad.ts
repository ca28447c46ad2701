// A deliberate type error: a time must be a number, not a string. `tsc --noEmit` must reject
// this file (and only for that line): the declarations are precise enough to catch it.
import { PersistClient, PersistLocation } from "persist-playground";

export async function wrong(): Promise<void> {
  const client = new PersistClient(PersistLocation.inMemory());
  const writer = await client.openWriter("orders");
  await writer.compareAndAppend([{ key: "apple", value: "3", time: "0" }], 0, 1);
}
