/**
 * The problem types of the IETF rate-limit headers draft (§10.2), and the 503 document every
 * refusal for want of a store answers with, as the specs expect them on the wire.
 */
export const QUOTA_EXCEEDED = 'https://iana.org/assignments/http-problem-types#quota-exceeded';
const REDUCED_CAPACITY = 'https://iana.org/assignments/http-problem-types#temporary-reduced-capacity';

/** The body of a 503 under `errorFormat: 'problem'`: no policy violated, a retry in 1 s. */
export const REDUCED_CAPACITY_DOCUMENT = {
  type: REDUCED_CAPACITY,
  title: 'Temporary Reduced Capacity',
  status: 503,
  detail: 'Rate limiter unavailable. Try again later.',
  'violated-policies': [],
  retryAfter: 1,
};
