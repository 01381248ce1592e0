const worker = {
  fetch() { return new Response("f"); },
  queue() {},
};
export default worker;
