export const queue = async () => {};
