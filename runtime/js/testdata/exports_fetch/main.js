export default { async fetch(request) { return new Response("f"); }, queue: "not a function" };
