// A worker that provides only a fetch handler: a QueueConsumer referencing a
// ModuleWorker running it must be refused (missing_handler).
export default {
  async fetch(request, env, ctx) {
    return new Response("fetch only");
  },
};
