/** The sample's catalog, served over REST (`CatalogController`) and GraphQL (`CatalogResolver`). */
export const PRODUCTS = [
  { id: '1', name: 'Teapot', price: 18 },
  { id: '2', name: 'Kettle', price: 35 },
];
