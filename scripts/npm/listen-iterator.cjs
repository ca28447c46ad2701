// Makes every Listen an async iterator: `for await (const events of listen)` yields what each
// `listen.next()` resolves to, until the shard is finished (its frontier is null).
function addListenIterator(Listen) {
  if (Listen.prototype[Symbol.asyncIterator]) return;
  Object.defineProperty(Listen.prototype, Symbol.asyncIterator, {
    configurable: true,
    value: async function* listenEvents() {
      while (this.frontier !== null) {
        yield await this.next();
      }
    },
  });
}
module.exports = { addListenIterator };
