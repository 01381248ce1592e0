// The per-batch overhead benchmark's worker: acknowledge everything, either
// with one acknowledgeAll or one acknowledge per message (env.MODE "each").
export default {
  async queue(batch, env) {
    if (env.MODE === "each") {
      await Promise.all(batch.messages.map((m) => batch.acknowledge(m.id)));
      return;
    }
    await batch.acknowledgeAll();
  },
};
